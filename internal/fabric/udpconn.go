package fabric

import "net"

// udpConn is the node's UDP socket as quic-go gets it: a *net.UDPConn
// (so that quic-go keeps its optimizations: batched reads, GSO, ECN, the
// DF bit; it asks for them by interface, sys_conn.go and
// sys_conn_buffers.go in quic-go v0.64) whose WriteMsgUDP sends to a
// netip.AddrPort. net's WriteMsgUDP with a *net.UDPAddr allocates the
// sockaddr of every packet (ipToSockaddr); WriteMsgUDPAddrPort builds it
// on the stack: two allocations less per fabric round trip.
type udpConn struct{ *net.UDPConn }

// WriteMsgUDP is the UDPConn's, with the address as a netip.AddrPort.
func (c udpConn) WriteMsgUDP(b, oob []byte, addr *net.UDPAddr) (n, oobn int, err error) {
	if addr == nil {
		return c.UDPConn.WriteMsgUDP(b, oob, nil)
	}
	return c.UDPConn.WriteMsgUDPAddrPort(b, oob, addr.AddrPort())
}
