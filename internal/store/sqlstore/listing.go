package sqlstore

import (
	"fmt"
	"strings"

	"github.com/cosmicac/cosmicac/internal/cosmic"
	"github.com/cosmicac/cosmicac/internal/store"
)

// ListingDialect is how a database filters jobs by labels and states.
type ListingDialect struct {
	// Labels filters by every label: joins after " FROM jobs" (SQLite:
	// one on job_labels per label) or a condition (PostgreSQL: a
	// containment test its GIN index answers), with their arguments in p.
	Labels func(p *Params, labels map[string]string) (join, cond string, err error)
	// States is the condition that col is one of states.
	States func(p *Params, col string, states []cosmic.State) string
	// MergeStates reads a list by createdAt of several states as a merge
	// of one ordered scan per state (PostgreSQL, whose planner would read
	// them all and sort them; SQLite's planner does it by itself).
	MergeStates bool
}

var sortColumns = map[string]string{
	store.SortCreatedAt: "created_at",
	store.SortUpdatedAt: "updated_at",
	store.SortName:      "name",
	store.SortState:     "state",
}

// Listing is a ListJobs query made SQL: the total from job_counts when the
// filter allows (Counted), so that a page past the end costs no query and a
// page in the back half is read from the end; the page's IDs from indexes,
// then only its rows.
type Listing struct {
	d       *Dialect
	q       store.ListJobsQuery
	from    string // " FROM jobs … WHERE …" of the matches
	args    Params // from's
	order   string
	reverse string
	offset  int
	counted bool
}

// NewListing is the Listing of q; an invalid q is ErrInvalid.
func NewListing(d *Dialect, q store.ListJobsQuery) (Listing, error) {
	q, err := q.Normalize()
	if err != nil {
		return Listing{}, fmt.Errorf("list jobs: %w", err)
	}
	var (
		where []string
		p     Params
		join  string
	)
	if len(q.Labels) > 0 {
		var cond string
		if join, cond, err = d.Listing.Labels(&p, q.Labels); err != nil {
			return Listing{}, fmt.Errorf("list jobs: labels: %w", err)
		}
		if cond != "" {
			where = append(where, cond)
		}
	}
	if q.Team != "" {
		where = append(where, "jobs.team = "+p.Add(q.Team))
	}
	if q.User != "" {
		where = append(where, "jobs.user_name = "+p.Add(q.User))
	}
	if q.Name != "" {
		where = append(where, "jobs.name = "+p.Add(q.Name))
	}
	if len(q.States) > 0 {
		where = append(where, d.Listing.States(&p, "jobs.state", q.States))
	}
	if !q.UpdatedAfter.IsZero() {
		where = append(where, "jobs.updated_at > "+p.Add(q.UpdatedAfter.UnixNano()))
	}
	if !q.UpdatedBefore.IsZero() {
		where = append(where, "jobs.updated_at < "+p.Add(q.UpdatedBefore.UnixNano()))
	}
	cond := ""
	if len(where) > 0 {
		cond = " WHERE " + strings.Join(where, " AND ")
	}
	orderBy := func(dir string) string {
		return " ORDER BY jobs." + sortColumns[q.Sort] + " " + dir + ", jobs.id " + dir
	}
	l := Listing{d: d, q: q, from: " FROM jobs" + join + cond, args: p, offset: q.Page * q.Size, counted: countable(q)}
	l.order, l.reverse = orderBy("DESC"), orderBy("ASC")
	if q.Order == store.OrderAsc {
		l.order, l.reverse = l.reverse, l.order
	}
	return l, nil
}

// Counted says whether the total comes from the counters, before the
// page: whether the query filters only by team, user and states.
func (l Listing) Counted() bool { return l.counted }

// countable says whether the total of q can come from the counters.
func countable(q store.ListJobsQuery) bool {
	return len(q.Labels) == 0 && q.Name == "" && q.UpdatedAfter.IsZero() && q.UpdatedBefore.IsZero()
}

// CountSQL counts the matches: a sum over job_counts when counted (the
// counters that triggers keep per team, user and state, migration 0002),
// else a COUNT(*). Its one column is a 64-bit integer.
func (l Listing) CountSQL() (string, []any) {
	if !l.counted {
		return "SELECT count(*)" + l.from, l.args
	}
	var (
		where []string
		p     Params
	)
	if l.q.Team != "" {
		where = append(where, "team = "+p.Add(l.q.Team))
	}
	if l.q.User != "" {
		where = append(where, "user_name = "+p.Add(l.q.User))
	}
	if len(l.q.States) > 0 {
		where = append(where, l.d.Listing.States(&p, "state", l.q.States))
	}
	cond := ""
	if len(where) > 0 {
		cond = " WHERE " + strings.Join(where, " AND ")
	}
	return "SELECT coalesce(sum(n), 0)" + l.d.Bigint + " FROM job_counts" + cond, p
}

// PageSQL reads the page, of JobColumns. For a counted listing, total is
// known: a page past the end is none (empty), and one in the back half is
// read from the end in reverse order, so the skipped entries are never
// more than half.
func (l Listing) PageSQL(total int64) (sql string, args []any, empty bool) {
	limit, skip, inner := l.q.Size, l.offset, l.order
	if l.counted {
		if int64(l.offset) >= total {
			return "", nil, true
		}
		end := min(int64(l.offset+l.q.Size), total)
		if back := total - end; back < int64(l.offset) {
			limit, skip, inner = int(end)-l.offset, int(back), l.reverse
		}
	}
	if l.merged() {
		sql, args := l.mergedSQL(limit, skip, inner == l.reverse)
		return sql, args, false
	}
	p := append(Params(nil), l.args...)
	return "SELECT " + JobColumns + " FROM jobs WHERE id IN (SELECT jobs.id" + l.from + inner +
		" LIMIT " + p.Add(limit) + " OFFSET " + p.Add(skip) + ")" + l.order, p, false
}

// merged says whether the page is read as a merge of one ordered scan per
// state: a list by createdAt of several states, and perhaps a team, which
// the (team, state, created_at, id) and (state, created_at, id) indexes
// give state by state in order. PostgreSQL reads "state = ANY(…)" there
// whole and sorts it (O(matches)); the merge of per-state scans with
// LIMIT stops each after offset + size entries (what SQLite's planner
// does by itself).
func (l Listing) merged() bool {
	q := l.q
	return l.d.Listing.MergeStates && len(q.States) >= 2 && q.Sort == store.SortCreatedAt && q.User == "" && q.Name == "" &&
		len(q.Labels) == 0 && q.UpdatedAfter.IsZero() && q.UpdatedBefore.IsZero()
}

// mergedSQL is the page of a merged listing, and its arguments: skip and
// limit over the merge of each state's first skip + limit, in the list's
// order (reversed: the other way).
func (l Listing) mergedSQL(limit, skip int, reversed bool) (string, []any) {
	dir := "DESC"
	if (l.q.Order == store.OrderAsc) != reversed {
		dir = "ASC"
	}
	order := " ORDER BY created_at " + dir + ", id " + dir
	var p Params
	team := ""
	if l.q.Team != "" {
		team = "team = " + p.Add(l.q.Team) + " AND "
	}
	n := p.Add(limit + skip)
	seen := map[cosmic.State]bool{}
	var branches []string
	for _, st := range l.q.States {
		if seen[st] {
			continue
		}
		seen[st] = true
		branches = append(branches, "(SELECT id, created_at FROM jobs WHERE "+team+"state = "+p.Add(string(st))+order+" LIMIT "+n+")")
	}
	return "SELECT " + JobColumns + " FROM jobs WHERE id IN (SELECT id FROM (" + strings.Join(branches, " UNION ALL ") + ") m" +
		order + " LIMIT " + p.Add(limit) + " OFFSET " + p.Add(skip) + ")" + l.order, p
}

// Total is the total of an uncounted listing whose page holds n jobs, when
// the page says it: a short, non-empty page (or an empty first page) ends
// the list.
func (l Listing) Total(n int) (int, bool) {
	if (n > 0 || l.offset == 0) && n < l.q.Size {
		return l.offset + n, true
	}
	return 0, false
}
