-- 0007: CPU and memory in placement (issue 17, docs/placement.md).
--
-- rack_nodes is what each node of a rack can give CosmicAC's jobs, written
-- by PutRack with the rack's nodes; 0 means not reported (not limited).
-- rack_overheads is the VM overhead the rack's worker reports (JSON
-- cosmic.VMOverhead). reservation_nodes is what one reservation takes on
-- one node. The triggers are the guarantee, as reservation_gpus' UNIQUE
-- constraint is for GPUs, that no claim takes a node past its CPU or
-- memory; a node that shrank below what it holds keeps its reservations
-- and takes no more. A reservation made before this migration has no row
-- here and takes no CPU or memory.

CREATE TABLE IF NOT EXISTS rack_nodes (
	rack       TEXT NOT NULL REFERENCES racks (id) ON DELETE CASCADE,
	node       TEXT NOT NULL,
	cpu_milli  INTEGER NOT NULL CHECK (cpu_milli >= 0),
	memory_mib INTEGER NOT NULL CHECK (memory_mib >= 0),
	PRIMARY KEY (rack, node)
);

CREATE TABLE IF NOT EXISTS rack_overheads (
	rack     TEXT PRIMARY KEY REFERENCES racks (id) ON DELETE CASCADE,
	overhead TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS reservation_nodes (
	job_id     TEXT NOT NULL,
	replica    INTEGER NOT NULL,
	rack       TEXT NOT NULL,
	node       TEXT NOT NULL,
	cpu_milli  INTEGER NOT NULL CHECK (cpu_milli >= 0),
	memory_mib INTEGER NOT NULL CHECK (memory_mib >= 0),
	PRIMARY KEY (job_id, replica, node),
	FOREIGN KEY (job_id, replica) REFERENCES reservations (job_id, replica) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS reservation_nodes_node ON reservation_nodes (rack, node);

CREATE TRIGGER IF NOT EXISTS reservation_nodes_cpu BEFORE INSERT ON reservation_nodes
WHEN NEW.cpu_milli > 0 AND (SELECT cpu_milli FROM rack_nodes WHERE rack = NEW.rack AND node = NEW.node) > 0
BEGIN
	SELECT RAISE(ABORT, 'cosmicac: node cpu exceeded')
	WHERE (SELECT coalesce(sum(cpu_milli), 0) FROM reservation_nodes WHERE rack = NEW.rack AND node = NEW.node) + NEW.cpu_milli
		> (SELECT cpu_milli FROM rack_nodes WHERE rack = NEW.rack AND node = NEW.node);
END;

CREATE TRIGGER IF NOT EXISTS reservation_nodes_memory BEFORE INSERT ON reservation_nodes
WHEN NEW.memory_mib > 0 AND (SELECT memory_mib FROM rack_nodes WHERE rack = NEW.rack AND node = NEW.node) > 0
BEGIN
	SELECT RAISE(ABORT, 'cosmicac: node memory exceeded')
	WHERE (SELECT coalesce(sum(memory_mib), 0) FROM reservation_nodes WHERE rack = NEW.rack AND node = NEW.node) + NEW.memory_mib
		> (SELECT memory_mib FROM rack_nodes WHERE rack = NEW.rack AND node = NEW.node);
END;
