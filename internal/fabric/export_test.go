package fabric

import "time"

// crash emulates the process dying: the sockets go away without any
// protocol-level goodbye, the way the kernel closes them on SIGKILL.
func (n *Node) crash() {
	n.udp.Close()
	if n.tln != nil {
		n.tln.Close()
	}
	n.mu.Lock()
	for pc := range n.all {
		if y, ok := pc.c.(yamuxConn); ok {
			y.under.Close()
		}
	}
	n.mu.Unlock()
	n.Close()
}

// idleStreams returns the idle call streams of the pooled connection to key.
func (n *Node) idleStreams(key PublicKey) []callStream {
	n.mu.Lock()
	pc := n.liveConn(key)
	n.mu.Unlock()
	if pc == nil {
		return nil
	}
	pc.idleMu.Lock()
	defer pc.idleMu.Unlock()
	return append([]callStream(nil), pc.idle...)
}

// ageIdleStreams makes every idle call stream to key look idle for d longer.
func (n *Node) ageIdleStreams(key PublicKey, d time.Duration) {
	n.mu.Lock()
	pc := n.liveConn(key)
	n.mu.Unlock()
	pc.idleMu.Lock()
	defer pc.idleMu.Unlock()
	for i := range pc.idle {
		pc.idle[i].at = pc.idle[i].at.Add(-d)
	}
}
