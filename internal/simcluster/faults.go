package simcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/cosmicac/cosmicac/internal/backoff"
	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/fabric"
	"github.com/cosmicac/cosmicac/internal/simcluster/simapi"
)

// RegisterFaults serves the fault methods on r. Params are decoded strictly
// (an unknown field is a bad_request, so a typo never silently means
// "any job"). Errors: bad_request for bad params, not_found for an unknown
// job, replica or node.
func (c *Cluster) RegisterFaults(r fabric.Registrar) {
	handle(r, simapi.MethodFailImport, func(p simapi.ReplicaParams) (simapi.FaultAck, error) { return c.FailImport(p.JobID, p.Replica) })
	handle(r, simapi.MethodCrash, func(p simapi.ReplicaParams) (simapi.FaultAck, error) { return c.Crash(p.JobID, p.Replica) })
	handle(r, simapi.MethodHoldAgent, func(p simapi.ReplicaParams) (simapi.FaultAck, error) { return c.HoldAgent(p.JobID, p.Replica) })
	handle(r, simapi.MethodLoseNode, func(p simapi.NodeParams) (simapi.FaultAck, error) { return c.LoseNode(p.Node) })
	handle(r, simapi.MethodRestoreNode, func(p simapi.NodeParams) (simapi.FaultAck, error) { return c.RestoreNode(p.Node) })
	handle(r, simapi.MethodUnreachable, func(p simapi.UnreachableParams) (simapi.FaultAck, error) {
		if p.Seconds <= 0 || p.Seconds > simapi.MaxUnreachable.Seconds() {
			return simapi.FaultAck{}, fabric.Errorf(fabric.CodeBadRequest, "%s: seconds must be above 0 and at most %.0f, got %v", simapi.MethodUnreachable, simapi.MaxUnreachable.Seconds(), p.Seconds)
		}
		return c.Unreachable(time.Duration(p.Seconds * float64(time.Second)))
	})
}

func handle[P any](r fabric.Registrar, method string, f func(P) (simapi.FaultAck, error)) {
	r.Handle(method, func(_ context.Context, req *fabric.Request) (any, error) {
		var p P
		if len(req.Params) > 0 && !bytes.Equal(bytes.TrimSpace(req.Params), []byte("null")) {
			d := json.NewDecoder(bytes.NewReader(req.Params))
			d.DisallowUnknownFields()
			if err := d.Decode(&p); err != nil {
				return nil, fabric.Errorf(fabric.CodeBadRequest, "decode %s params: %v", method, err)
			}
		}
		return f(p)
	})
}

// FailImport makes an import fail at about 50% with import_failed: the
// running or next import of the named replica, or with jobID "" the next
// import to start anywhere on the rack.
func (c *Cluster) FailImport(jobID string, replica int) (simapi.FaultAck, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ack := simapi.FaultAck{Fault: simapi.MethodFailImport}
	if jobID == "" {
		c.failNextImport = true
		ack.Detail = "the next root-disk import to start will fail at 50%"
		return ack, nil
	}
	r, err := c.replicaLocked(simapi.MethodFailImport, jobID, replica)
	if err != nil {
		return simapi.FaultAck{}, err
	}
	if r.disk {
		return simapi.FaultAck{}, fabric.Errorf(fabric.CodeBadRequest, "%s: replica %d of job %s already has its root disk; no import left to fail", simapi.MethodFailImport, replica, jobID)
	}
	r.failImport = true
	ack.Detail = fmt.Sprintf("the root-disk import of replica %d of job %s will fail at 50%%", replica, jobID)
	if r.phase == phaseImport && r.importPct >= 50 {
		ack.Detail = fmt.Sprintf("the root-disk import of replica %d of job %s will fail at its next step", replica, jobID)
	}
	return ack, nil
}

// HoldAgent makes a replica's agent never connect, as a VM booted from an
// image without cloud-init: the replica stays starting after its boot
// step (and after every restart) until the ork's agent deadline fails it.
// With jobID "" it holds the next replica to boot anywhere on the rack.
func (c *Cluster) HoldAgent(jobID string, replica int) (simapi.FaultAck, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ack := simapi.FaultAck{Fault: simapi.MethodHoldAgent}
	if jobID == "" {
		c.holdNextAgent = true
		ack.Detail = "the agent of the next replica to boot will not connect"
		return ack, nil
	}
	r, err := c.replicaLocked(simapi.MethodHoldAgent, jobID, replica)
	if err != nil {
		return simapi.FaultAck{}, err
	}
	if r.state == cosmic.StateRunning {
		return simapi.FaultAck{}, fabric.Errorf(fabric.CodeBadRequest, "%s: the agent of replica %d of job %s connected already (it is running)", simapi.MethodHoldAgent, replica, jobID)
	}
	r.holdAgent = true
	c.stopAgent(r) // one started already never connects now
	ack.Detail = fmt.Sprintf("the agent of replica %d of job %s will not connect", replica, jobID)
	return ack, nil
}

// Crash crashes the replica's VMIs: the replica fails with vmi_crashed and
// releases its GPUs; its disk is kept.
func (c *Cluster) Crash(jobID string, replica int) (simapi.FaultAck, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if jobID == "" {
		return simapi.FaultAck{}, fabric.Errorf(fabric.CodeBadRequest, "%s: jobId is required", simapi.MethodCrash)
	}
	r, err := c.replicaLocked(simapi.MethodCrash, jobID, replica)
	if err != nil {
		return simapi.FaultAck{}, err
	}
	if len(r.vmis) == 0 {
		return simapi.FaultAck{}, fabric.Errorf(fabric.CodeBadRequest, "%s: replica %d of job %s has no VMI to crash (it is %s)", simapi.MethodCrash, replica, jobID, r.state)
	}
	what := describeVMIs(r.vmis)
	c.record(r, time.Now(), "crash", false, "%s crashed", what)
	c.crashAgent(r)
	c.fail(r, cosmic.ReasonVMICrashed, what+" crashed (simulated)")
	return simapi.FaultAck{Fault: simapi.MethodCrash, Detail: fmt.Sprintf("replica %d of job %s: %s crashed", replica, jobID, what)}, nil
}

// LoseNode makes a node NotReady: every replica holding GPUs on it fails
// with node_lost (its VMIs on other nodes go too), and the capacity report
// shows the node not ready. Losing a lost node again changes nothing.
func (c *Cluster) LoseNode(node string) (simapi.FaultAck, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, err := c.nodeLocked(simapi.MethodLoseNode, node)
	if err != nil {
		return simapi.FaultAck{}, err
	}
	ack := simapi.FaultAck{Fault: simapi.MethodLoseNode, Detail: fmt.Sprintf("node %s was already lost", node)}
	if n.lost {
		return ack, nil
	}
	n.lost = true
	now := time.Now()
	failed := 0
	for _, j := range c.jobs {
		for _, r := range j.replicas {
			if !r.claimed || !onNode(r.res, node) {
				continue
			}
			if r.phase == phaseDelete || (r.phase == phaseShutdown && r.then == phaseDelete) {
				c.remove(j, r, true, now)
				continue
			}
			c.record(r, now, "node_lost", false, "node %s was lost with replica %d on it", node, r.key.replica)
			c.fail(r, cosmic.ReasonNodeLost, "node "+node)
			failed++
		}
	}
	c.markCapacity()
	ack.Detail = fmt.Sprintf("node %s lost; %d replica(s) failed", node, failed)
	return ack, nil
}

// RestoreNode makes a lost node Ready again. Its failed replicas stay
// failed: the ork places them again.
func (c *Cluster) RestoreNode(node string) (simapi.FaultAck, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, err := c.nodeLocked(simapi.MethodRestoreNode, node)
	if err != nil {
		return simapi.FaultAck{}, err
	}
	ack := simapi.FaultAck{Fault: simapi.MethodRestoreNode, Detail: fmt.Sprintf("node %s was ready", node)}
	if n.lost {
		n.lost = false
		c.markCapacity()
		ack.Detail = fmt.Sprintf("node %s ready again", node)
	}
	return ack, nil
}

// Unreachable takes the worker off the fabric for d (extending an outage
// under way). Its link (Deps.Link) goes down shortly after the ack is sent
// and comes back up when d has passed; until then worker methods answer
// unavailable and no report is sent, while the VMIs go on living. Back up,
// the worker reports its whole state (every replica and its capacity).
func (c *Cluster) Unreachable(d time.Duration) (simapi.FaultAck, error) {
	if d <= 0 || d > simapi.MaxUnreachable {
		return simapi.FaultAck{}, fabric.Errorf(fabric.CodeBadRequest, "%s: duration must be above 0 and at most %s, got %s", simapi.MethodUnreachable, simapi.MaxUnreachable, d)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	until := time.Now().Add(d)
	if until.After(c.offlineUntil) {
		c.offlineUntil = until
	}
	signal(c.outage)
	return simapi.FaultAck{Fault: simapi.MethodUnreachable, Detail: fmt.Sprintf("rack %s unreachable for %s", c.cfg.Rack, d), Until: c.offlineUntil}, nil
}

func onNode(res cosmic.Reservation, node string) bool {
	for _, a := range res.Nodes {
		if a.Node == node {
			return true
		}
	}
	return false
}

func (c *Cluster) replicaLocked(method, jobID string, replica int) (*replica, error) {
	j := c.jobs[jobID]
	if j == nil {
		return nil, fabric.Errorf(fabric.CodeNotFound, "%s: no job %s on rack %s", method, jobID, c.cfg.Rack)
	}
	r := j.replicas[replica]
	if r == nil {
		return nil, fabric.Errorf(fabric.CodeNotFound, "%s: job %s has no replica %d on rack %s", method, jobID, replica, c.cfg.Rack)
	}
	return r, nil
}

func (c *Cluster) nodeLocked(method, node string) (*simNode, error) {
	if node == "" {
		return nil, fabric.Errorf(fabric.CodeBadRequest, "%s: node is required", method)
	}
	n := c.byName[node]
	if n == nil {
		return nil, fabric.Errorf(fabric.CodeNotFound, "%s: rack %s has no node %q", method, c.cfg.Rack, node)
	}
	return n, nil
}

// outageLoop plays the outages that Unreachable asks for.
func (c *Cluster) outageLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.outage:
		}
		c.mu.Lock()
		link, until := c.link, c.offlineUntil
		c.mu.Unlock()
		c.log.Info("worker unreachable", "until", until)
		if link != nil {
			if !backoff.Sleep(ctx, c.ackGrace) {
				return
			}
			if err := link.Down(); err != nil {
				c.log.Warn("take link down", "err", err)
			}
		}
		for {
			c.mu.Lock()
			d := time.Until(c.offlineUntil)
			c.mu.Unlock()
			if d <= 0 {
				break
			}
			if !backoff.Sleep(ctx, d) {
				return
			}
		}
		if link != nil {
			for retry := (backoff.Backoff{Min: c.retryMin, Max: c.retryMax}); ; {
				err := link.Up()
				if err == nil {
					break
				}
				wait := retry.Next()
				c.log.Warn("bring link up", "err", err, "retry_in", wait)
				if !backoff.Sleep(ctx, wait) {
					return
				}
			}
		}
		c.mu.Lock()
		if !time.Now().Before(c.offlineUntil) {
			select { // this outage's own request, or one it already covered
			case <-c.outage:
			default:
			}
		}
		c.markAll()
		c.mu.Unlock()
		c.log.Info("worker reachable again")
	}
}
