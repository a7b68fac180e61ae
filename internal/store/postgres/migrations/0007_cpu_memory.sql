-- 0007: CPU and memory in placement (issue 17, docs/placement.md).
--
-- rack_nodes is what each node of a rack can give CosmicAC's jobs (0: not
-- reported, not limited); rack_overheads the VM overhead of the rack's
-- worker; reservation_nodes what one reservation takes on one node. The
-- triggers refuse a claim that takes a node past its CPU or memory, as
-- SQLite's do. Each first locks the node's rack_nodes row (FOR UPDATE):
-- claims on one node queue there, and the sum it then reads includes every
-- committed claim even at READ COMMITTED; under the store's SERIALIZABLE
-- transactions a claim that raced another is also aborted and retried.

CREATE TABLE IF NOT EXISTS rack_nodes (
	rack       text COLLATE "C" NOT NULL REFERENCES racks (id) ON DELETE CASCADE,
	node       text COLLATE "C" NOT NULL,
	cpu_milli  bigint NOT NULL CHECK (cpu_milli >= 0),
	memory_mib bigint NOT NULL CHECK (memory_mib >= 0),
	PRIMARY KEY (rack, node)
);

CREATE TABLE IF NOT EXISTS rack_overheads (
	rack     text COLLATE "C" PRIMARY KEY REFERENCES racks (id) ON DELETE CASCADE,
	overhead jsonb NOT NULL
);

CREATE TABLE IF NOT EXISTS reservation_nodes (
	job_id     text COLLATE "C" NOT NULL,
	replica    integer NOT NULL,
	rack       text COLLATE "C" NOT NULL,
	node       text COLLATE "C" NOT NULL,
	cpu_milli  bigint NOT NULL CHECK (cpu_milli >= 0),
	memory_mib bigint NOT NULL CHECK (memory_mib >= 0),
	PRIMARY KEY (job_id, replica, node),
	FOREIGN KEY (job_id, replica) REFERENCES reservations (job_id, replica) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS reservation_nodes_node ON reservation_nodes (rack, node);

-- reservation_nodes_check(what): what is 'cpu' or 'memory'.
CREATE OR REPLACE FUNCTION reservation_nodes_check() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
	cap  bigint;
	used bigint;
	ask  bigint;
BEGIN
	IF TG_ARGV[0] = 'cpu' THEN
		ask := NEW.cpu_milli;
		SELECT cpu_milli INTO cap FROM rack_nodes WHERE rack = NEW.rack AND node = NEW.node FOR UPDATE;
	ELSE
		ask := NEW.memory_mib;
		SELECT memory_mib INTO cap FROM rack_nodes WHERE rack = NEW.rack AND node = NEW.node FOR UPDATE;
	END IF;
	IF ask = 0 OR cap IS NULL OR cap = 0 THEN
		RETURN NEW;
	END IF;
	IF TG_ARGV[0] = 'cpu' THEN
		SELECT coalesce(sum(cpu_milli), 0) INTO used FROM reservation_nodes WHERE rack = NEW.rack AND node = NEW.node;
	ELSE
		SELECT coalesce(sum(memory_mib), 0) INTO used FROM reservation_nodes WHERE rack = NEW.rack AND node = NEW.node;
	END IF;
	IF used + ask > cap THEN
		RAISE EXCEPTION 'cosmicac: node % exceeded', TG_ARGV[0];
	END IF;
	RETURN NEW;
END;
$$;

DROP TRIGGER IF EXISTS reservation_nodes_cpu ON reservation_nodes;
CREATE TRIGGER reservation_nodes_cpu BEFORE INSERT ON reservation_nodes
	FOR EACH ROW EXECUTE FUNCTION reservation_nodes_check('cpu');
DROP TRIGGER IF EXISTS reservation_nodes_memory ON reservation_nodes;
CREATE TRIGGER reservation_nodes_memory BEFORE INSERT ON reservation_nodes
	FOR EACH ROW EXECUTE FUNCTION reservation_nodes_check('memory');
