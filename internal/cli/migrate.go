package cli

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/onceplan/onceplan/internal/app"
)

func runMigrate(ctx context.Context, env Env, args []string) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	var db dbFlags
	db.register(fs, env)
	if err := parse(fs, env, args); err != nil {
		return err
	}
	d, err := app.OpenDB(ctx, app.DBOptions{
		URL:     db.databaseURL,
		DataDir: db.dataDir,
		Migrate: true,
		Logger:  newLogger(env.Stderr),
	})
	if err != nil {
		return err
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fmt.Fprintln(env.Stdout, "the database schema is current")
	return d.Close(closeCtx)
}
