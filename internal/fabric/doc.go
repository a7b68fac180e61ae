// Package fabric is the peer-to-peer layer between CosmicAC's components.
//
// Components address each other by ed25519 public key, not by host and port.
// Every connection is mutually authenticated TLS 1.3, carried over QUIC
// (quic-go) with a TCP+TLS fallback (multiplexed with yamux) for networks that
// drop UDP. The certificate each side presents is self-signed by its identity
// key, so a handshake proves possession of that key; a client pins the key it
// dialled and a server admits only keys its Policy lets in. The refusal happens
// inside the TLS handshake, before any application byte is exchanged.
//
// On top of a connection the fabric offers request/response calls with JSON
// payloads and structured errors (Node.Call), fire-and-forget events
// (Node.Notify) and long-lived bidirectional byte streams (Node.OpenStream).
// Connections are pooled per key, in both directions: once peer A has
// connected to B, B reaches A over the same connection, which is how a peer
// behind NAT (an agent inside a VMI) stays reachable without an inbound port.
//
// Discovery (Directory, Announcer, Node.Lookup) lets peers announce themselves
// under a topic and be found by key and address; announcements expire unless
// refreshed. See docs/design/0001-fabric.md for the design and its limits.
//
// Any package may import fabric; fabric imports no other CosmicAC package
// except internal/version.
package fabric
