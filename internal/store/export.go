package store

// Table is every row of one table, for copying a whole database from one
// implementation to another (database.Copy): the column names and each
// row's values in that order, as the source's driver gives them.
type Table struct {
	Name    string
	Columns []string
	Rows    [][]any
}
