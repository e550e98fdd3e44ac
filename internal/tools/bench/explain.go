package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// explainPages makes the page figures print the plan of every query a
// page makes (-explain).
var explainPages bool

// explainDB runs each query twice: under EXPLAIN (ANALYZE, BUFFERS),
// printing the plan, then for real.
type explainDB struct{ pool *pgxpool.Pool }

func (e explainDB) explain(ctx context.Context, sql string, args ...any) {
	rows, err := e.pool.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+sql, args...)
	if err != nil {
		fmt.Printf("    (EXPLAIN failed: %v)\n", err)
		return
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		fmt.Printf("    (EXPLAIN failed: %v)\n", err)
		return
	}
	fmt.Printf("    %s\n", strings.Join(lines, "\n    "))
}

// Begin starts a transaction whose queries are explained too (a statement
// that sets something for its transaction, such as jit, is explained as
// it runs).
func (e explainDB) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := e.pool.Begin(ctx)
	return explainTx{Tx: tx}, err
}

// explainTx is a transaction that explains each query before running it.
type explainTx struct{ pgx.Tx }

func (e explainTx) explain(ctx context.Context, sql string, args ...any) {
	rows, err := e.Tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+sql, args...)
	if err != nil {
		fmt.Printf("    (EXPLAIN failed: %v)\n", err)
		return
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		fmt.Printf("    (EXPLAIN failed: %v)\n", err)
		return
	}
	fmt.Printf("    %s\n", strings.Join(lines, "\n    "))
}

func (e explainTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	e.explain(ctx, sql, args...)
	return e.Tx.Query(ctx, sql, args...)
}

func (e explainTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	e.explain(ctx, sql, args...)
	return e.Tx.QueryRow(ctx, sql, args...)
}

func (e explainDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return e.pool.Exec(ctx, sql, args...)
}

func (e explainDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	e.explain(ctx, sql, args...)
	return e.pool.Query(ctx, sql, args...)
}

func (e explainDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	e.explain(ctx, sql, args...)
	return e.pool.QueryRow(ctx, sql, args...)
}
