package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/onceplan/onceplan/audit"
)

func main() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("TEST_DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	for range 5 {
		start := time.Now()
		m, err := audit.ForPlan(ctx, pool, 1)
		if err != nil {
			panic(err)
		}
		el := time.Since(start)
		start = time.Now()
		var c int
		pool.QueryRow(ctx, `SELECT count(*) FROM effect`).Scan(&c)
		fmt.Printf("audit %v count %v %+v\n", el, time.Since(start), m)
	}
}
