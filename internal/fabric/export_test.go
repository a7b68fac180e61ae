package fabric

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
