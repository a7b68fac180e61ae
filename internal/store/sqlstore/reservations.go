package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// ClaimGPUs implements store.Tx. The UNIQUE (rack, node, gpu_index)
// constraint is what refuses a GPU claimed twice, the triggers of 0007 a
// node taken past its CPU or memory; the savepoint makes the claim all or
// nothing even inside a transaction that goes on after it.
func (t *Tx) ClaimGPUs(ctx context.Context, r cosmic.Reservation) error {
	if err := checkReservation(r); err != nil {
		return fmt.Errorf("claim gpus for job %s replica %d: %w", r.JobID, r.Replica, err)
	}
	var jobOK, rackOK bool
	err := t.q.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM jobs WHERE id = $1), EXISTS (SELECT 1 FROM racks WHERE id = $2)",
		r.JobID, r.Rack).Scan(&jobOK, &rackOK)
	if err != nil {
		return fmt.Errorf("claim gpus for job %s: %w", r.JobID, t.d.wrap(err))
	}
	if !jobOK {
		return fmt.Errorf("claim gpus: job %s: %w", r.JobID, cosmic.ErrNotFound)
	}
	if !rackOK {
		return fmt.Errorf("claim gpus for job %s: rack %q is not registered: %w", r.JobID, r.Rack, cosmic.ErrInvalid)
	}
	var taken bool
	err = t.savepoint(ctx, func() error {
		_, err := t.q.Exec(ctx, "INSERT INTO reservations (job_id, replica, rack) VALUES ($1, $2, $3)", r.JobID, r.Replica, r.Rack)
		if t.d.IsUnique(err) {
			return fmt.Errorf("claim gpus: job %s replica %d already holds a reservation: %w", r.JobID, r.Replica, cosmic.ErrConflict)
		}
		if err != nil {
			return fmt.Errorf("claim gpus for job %s: %w", r.JobID, t.d.wrap(err))
		}
		var b strings.Builder
		b.WriteString("INSERT INTO reservation_gpus (job_id, replica, rack, node, node_pos, gpu_index) VALUES ")
		p := make(Params, 0, 6*r.Count())
		for pos, n := range r.Nodes {
			for _, i := range n.GPUs {
				if len(p) > 0 {
					b.WriteString(", ")
				}
				fmt.Fprintf(&b, "(%s, %s, %s, %s, %s, %s)", p.Add(r.JobID), p.Add(r.Replica), p.Add(r.Rack), p.Add(n.Node), p.Add(pos), p.Add(i))
			}
		}
		_, err = t.q.Exec(ctx, b.String(), p...)
		if t.d.IsUnique(err) {
			taken = true
			return err
		}
		if err != nil {
			return fmt.Errorf("claim gpus for job %s: %w", r.JobID, t.d.wrap(err))
		}
		for _, n := range r.Nodes {
			if n.CPUMilli == 0 && n.MemoryMiB == 0 {
				continue
			}
			_, err := t.q.Exec(ctx, "INSERT INTO reservation_nodes (job_id, replica, rack, node, cpu_milli, memory_mib) VALUES ($1, $2, $3, $4, $5, $6)",
				r.JobID, r.Replica, r.Rack, n.Node, n.CPUMilli, n.MemoryMiB)
			if what, ok := overcommit(t.d, err); ok {
				return fmt.Errorf("claim for job %s replica %d: node %s/%s has not %s free: %w", r.JobID, r.Replica, r.Rack, n.Node, what, cosmic.ErrConflict)
			}
			if err != nil {
				return fmt.Errorf("claim cpu and memory for job %s: %w", r.JobID, err)
			}
		}
		t.writes += r.Count()
		return nil
	})
	if taken {
		// Rolled back to the savepoint: the transaction reads again.
		return fmt.Errorf("claim gpus for job %s replica %d: %s: %w", r.JobID, r.Replica, t.holders(ctx, r), cosmic.ErrConflict)
	}
	return err
}

// overcommit reports whether err is a trigger of migration 0007 refusing a
// claim, and what it lacked.
func overcommit(d *Dialect, err error) (string, bool) {
	if err == nil || d.Raised != nil && !d.Raised(err) {
		return "", false
	}
	switch {
	case strings.Contains(err.Error(), "cosmicac: node cpu exceeded"):
		return "the CPU asked", true
	case strings.Contains(err.Error(), "cosmicac: node memory exceeded"):
		return "the memory asked", true
	}
	return "", false
}

// checkReservation reports what makes r unclaimable: ErrInvalid.
func checkReservation(r cosmic.Reservation) error {
	if r.JobID == "" || r.Rack == "" || r.Replica < 0 || r.Count() == 0 {
		return fmt.Errorf("a reservation needs a job, a replica ≥ 0, a rack and GPUs: %w", cosmic.ErrInvalid)
	}
	nodes := map[string]bool{}
	for _, n := range r.Nodes {
		if n.Node == "" || nodes[n.Node] {
			return fmt.Errorf("node %q: empty or listed twice: %w", n.Node, cosmic.ErrInvalid)
		}
		if n.CPUMilli < 0 || n.MemoryMiB < 0 {
			return fmt.Errorf("node %q: negative CPU or memory: %w", n.Node, cosmic.ErrInvalid)
		}
		nodes[n.Node] = true
		seen := map[int]bool{}
		for _, i := range n.GPUs {
			if i < 0 || seen[i] {
				return fmt.Errorf("gpu %s/%s/%d: negative or listed twice: %w", r.Rack, n.Node, i, cosmic.ErrInvalid)
			}
			seen[i] = true
		}
	}
	return nil
}

// holders describes who holds the GPUs of r that are already claimed.
func (t *Tx) holders(ctx context.Context, r cosmic.Reservation) string {
	var out []string
	for _, g := range r.GPUs() {
		var job string
		var replica int
		err := t.q.QueryRow(ctx, "SELECT job_id, replica FROM reservation_gpus WHERE rack = $1 AND node = $2 AND gpu_index = $3",
			g.Rack, g.Node, g.Index).Scan(&job, &replica)
		if err == nil {
			out = append(out, fmt.Sprintf("gpu %s held by job %s replica %d", g, job, replica))
		}
	}
	if len(out) == 0 {
		return "a gpu is already claimed"
	}
	return strings.Join(out, ", ")
}

// Reservations implements store.Tx.
func (t *Tx) Reservations(ctx context.Context) ([]cosmic.Reservation, error) {
	return t.reservations(ctx, "", nil)
}

// JobReservations implements store.Tx.
func (t *Tx) JobReservations(ctx context.Context, jobID string) ([]cosmic.Reservation, error) {
	return t.reservations(ctx, " WHERE job_id = $1", []any{jobID})
}

func (t *Tx) reservations(ctx context.Context, where string, args []any) ([]cosmic.Reservation, error) {
	rows, err := t.q.Query(ctx, "SELECT job_id, replica, rack, node, gpu_index FROM reservation_gpus"+where+
		" ORDER BY job_id, replica, node_pos, gpu_index", args...)
	if err != nil {
		return nil, fmt.Errorf("list reservations: %w", err)
	}
	defer rows.Close()
	out := []cosmic.Reservation{}
	for rows.Next() {
		var (
			job, rack, node string
			replica, index  int
		)
		if err := rows.Scan(&job, &replica, &rack, &node, &index); err != nil {
			return nil, fmt.Errorf("list reservations: %w", err)
		}
		if len(out) == 0 || out[len(out)-1].JobID != job || out[len(out)-1].Replica != replica {
			out = append(out, cosmic.Reservation{JobID: job, Replica: replica, Rack: rack})
		}
		r := &out[len(out)-1]
		if len(r.Nodes) == 0 || r.Nodes[len(r.Nodes)-1].Node != node {
			r.Nodes = append(r.Nodes, cosmic.NodeAlloc{Node: node})
		}
		n := &r.Nodes[len(r.Nodes)-1]
		n.GPUs = append(n.GPUs, index)
	}
	if err := rows.Err(); err != nil {
		if t.d.unstorable(err) {
			return []cosmic.Reservation{}, nil // a job ID no row can have
		}
		return nil, fmt.Errorf("list reservations: %w", err)
	}
	if err := t.reservationNodes(ctx, out, where, args); err != nil {
		return nil, err
	}
	return out, nil
}

// reservationNodes fills in the CPU and memory of the reservations listed
// (by job ID, then replica) from reservation_nodes.
func (t *Tx) reservationNodes(ctx context.Context, out []cosmic.Reservation, where string, args []any) error {
	rows, err := t.q.Query(ctx, "SELECT job_id, replica, node, cpu_milli, memory_mib FROM reservation_nodes"+where+
		" ORDER BY job_id, replica", args...)
	if err != nil {
		return fmt.Errorf("list reservations: %w", err)
	}
	defer rows.Close()
	i := 0
	for rows.Next() {
		var (
			job, node string
			replica   int
			cpu, mem  int64
		)
		if err := rows.Scan(&job, &replica, &node, &cpu, &mem); err != nil {
			return fmt.Errorf("list reservations: %w", err)
		}
		for i < len(out) && (out[i].JobID < job || out[i].JobID == job && out[i].Replica < replica) {
			i++
		}
		if i == len(out) || out[i].JobID != job || out[i].Replica != replica {
			continue // cannot be: the row goes with its reservation
		}
		for k := range out[i].Nodes {
			if a := &out[i].Nodes[k]; a.Node == node {
				a.CPUMilli, a.MemoryMiB = cpu, mem
			}
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("list reservations: %w", err)
	}
	return nil
}

// ReleaseGPUs implements store.Tx; the GPU rows go with their reservation
// (ON DELETE CASCADE).
func (t *Tx) ReleaseGPUs(ctx context.Context, jobID string, replica int) error {
	var err error
	if replica == store.AllReplicas {
		_, err = t.q.Exec(ctx, "DELETE FROM reservations WHERE job_id = $1", jobID)
	} else {
		_, err = t.q.Exec(ctx, "DELETE FROM reservations WHERE job_id = $1 AND replica = $2", jobID, replica)
	}
	if err != nil {
		return fmt.Errorf("release gpus of job %s: %w", jobID, err)
	}
	return nil
}

// PutRack implements store.Tx.
func (t *Tx) PutRack(ctx context.Context, r store.Rack) error {
	if r.ID == "" {
		return fmt.Errorf("put rack: empty ID: %w", cosmic.ErrInvalid)
	}
	for _, n := range r.Nodes {
		if n.CPUMilli < 0 || n.MemoryMiB < 0 {
			return fmt.Errorf("put rack %s: node %s: negative CPU or memory: %w", r.ID, n.Name, cosmic.ErrInvalid)
		}
	}
	old, err := t.GetRack(ctx, r.ID)
	switch {
	case err == nil:
		r.CreatedAt = old.CreatedAt
	case !errors.Is(err, cosmic.ErrNotFound):
		return err
	}
	rack, err := json.Marshal(r.Rack)
	if err != nil {
		return fmt.Errorf("put rack %s: %w", r.ID, err)
	}
	addrs, err := json.Marshal(r.WorkerAddrs)
	if err != nil {
		return fmt.Errorf("put rack %s: %w", r.ID, err)
	}
	nodes, err := json.Marshal(r.Nodes)
	if err != nil {
		return fmt.Errorf("put rack %s: %w", r.ID, err)
	}
	overhead, err := json.Marshal(r.Overhead)
	if err != nil {
		return fmt.Errorf("put rack %s: %w", r.ID, err)
	}
	if _, err := t.q.Exec(ctx, `INSERT INTO racks (id, rack, worker_addrs, nodes) VALUES ($1, $2, $3, $4)
		ON CONFLICT (id) DO UPDATE SET rack = excluded.rack, worker_addrs = excluded.worker_addrs, nodes = excluded.nodes`,
		r.ID, t.d.JSON(rack), t.d.JSON(addrs), t.d.JSON(nodes)); err != nil {
		return fmt.Errorf("put rack %s: %w", r.ID, t.d.wrap(err))
	}
	if _, err := t.q.Exec(ctx, `INSERT INTO rack_overheads (rack, overhead) VALUES ($1, $2)
		ON CONFLICT (rack) DO UPDATE SET overhead = excluded.overhead`, r.ID, t.d.JSON(overhead)); err != nil {
		return fmt.Errorf("put rack %s: %w", r.ID, t.d.wrap(err))
	}
	// The nodes' CPU and memory, which the claim triggers check.
	if _, err := t.q.Exec(ctx, "DELETE FROM rack_nodes WHERE rack = $1", r.ID); err != nil {
		return fmt.Errorf("put rack %s: %w", r.ID, err)
	}
	for _, n := range r.Nodes {
		if n.CPUMilli == 0 && n.MemoryMiB == 0 {
			continue
		}
		if _, err := t.q.Exec(ctx, `INSERT INTO rack_nodes (rack, node, cpu_milli, memory_mib) VALUES ($1, $2, $3, $4)
			ON CONFLICT (rack, node) DO UPDATE SET cpu_milli = excluded.cpu_milli, memory_mib = excluded.memory_mib`,
			r.ID, n.Name, n.CPUMilli, n.MemoryMiB); err != nil {
			return fmt.Errorf("put rack %s: node %s: %w", r.ID, n.Name, t.d.wrap(err))
		}
	}
	return nil
}

func scanRack(s Row) (store.Rack, error) {
	var (
		r                            store.Rack
		rack, addrs, nodes, overhead []byte
	)
	if err := s.Scan(&rack, &addrs, &nodes, &overhead); err != nil {
		return store.Rack{}, err
	}
	if len(overhead) > 0 {
		if err := json.Unmarshal(overhead, &r.Overhead); err != nil {
			return store.Rack{}, fmt.Errorf("decode rack overhead: %w", err)
		}
	}
	if err := json.Unmarshal(rack, &r.Rack); err != nil {
		return store.Rack{}, fmt.Errorf("decode rack: %w", err)
	}
	if err := json.Unmarshal(addrs, &r.WorkerAddrs); err != nil {
		return store.Rack{}, fmt.Errorf("rack %s: decode worker addresses: %w", r.ID, err)
	}
	if err := json.Unmarshal(nodes, &r.Nodes); err != nil {
		return store.Rack{}, fmt.Errorf("rack %s: decode nodes: %w", r.ID, err)
	}
	return r, nil
}

const rackSelect = "SELECT rack, worker_addrs, nodes, (SELECT overhead FROM rack_overheads WHERE rack_overheads.rack = racks.id) FROM racks"

// GetRack implements store.Tx.
func (t *Tx) GetRack(ctx context.Context, id string) (store.Rack, error) {
	r, err := scanRack(t.q.QueryRow(ctx, rackSelect+" WHERE id = $1", id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Rack{}, fmt.Errorf("rack %s: %w", id, cosmic.ErrNotFound)
	}
	if err != nil {
		return store.Rack{}, fmt.Errorf("get rack %s: %w", id, t.d.wrap(err))
	}
	return r, nil
}

// Racks implements store.Tx.
func (t *Tx) Racks(ctx context.Context) ([]store.Rack, error) {
	rows, err := t.q.Query(ctx, rackSelect+" ORDER BY id")
	if err != nil {
		return nil, fmt.Errorf("list racks: %w", err)
	}
	defer rows.Close()
	out := []store.Rack{}
	for rows.Next() {
		r, err := scanRack(rows)
		if err != nil {
			return nil, fmt.Errorf("list racks: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list racks: %w", err)
	}
	return out, nil
}

// DeleteRack implements store.Tx.
func (t *Tx) DeleteRack(ctx context.Context, id string) error {
	var held int
	if err := t.q.QueryRow(ctx, "SELECT count(*) FROM reservations WHERE rack = $1", id).Scan(&held); err != nil {
		return fmt.Errorf("delete rack %s: %w", id, t.d.wrap(err))
	}
	if held > 0 {
		return fmt.Errorf("delete rack %s: %d reservations hold its GPUs: %w", id, held, cosmic.ErrConflict)
	}
	res, err := t.q.Exec(ctx, "DELETE FROM racks WHERE id = $1", id)
	if err != nil {
		return fmt.Errorf("delete rack %s: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return errors.Join(fmt.Errorf("rack %s: %w", id, cosmic.ErrNotFound), err)
	}
	return nil
}
