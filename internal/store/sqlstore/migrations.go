package sqlstore

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Migration is one schema migration, the file migrations/NNNN_name.sql.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations lists the migrations of fsys (a store's embedded
// migrations/*.sql), by version. Versions are unique but may have gaps
// while migrations written on parallel branches land (0005 before 0004):
// a store applies every one a database has not recorded, so one that lands
// later with a lower number is still applied. Each migration therefore
// stands on its own (IF NOT EXISTS, no dependence on a higher-numbered
// one).
func Migrations(fsys fs.FS) ([]Migration, error) {
	names, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, n := range names {
		base := path.Base(n)
		num, name, ok := strings.Cut(strings.TrimSuffix(base, ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must be NNNN_name.sql", base)
		}
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, Name: name, SQL: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	for i := 1; i < len(ms); i++ {
		if ms[i].Version == ms[i-1].Version {
			return nil, fmt.Errorf("migration %d_%s: version %d is also %s's", ms[i].Version, ms[i].Name, ms[i].Version, ms[i-1].Name)
		}
	}
	return ms, nil
}
