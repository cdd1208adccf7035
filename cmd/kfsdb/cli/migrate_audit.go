package cli

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/knowledgefs/kfsdb/cmd/kfsdb/ops"
	"github.com/knowledgefs/kfsdb/migrate"
	"github.com/knowledgefs/kfsdb/migrate/redact"
)

// migrateRun is what an up or a down did, for its audit line.
type migrateRun struct {
	res *migrate.Result
	// refused says why a down rolled nothing back (nothing to roll back,
	// or the seed's floor): it is reported, not returned as an error.
	refused string
}

// auditedMigration runs opts's up or down on p and writes its audit line
// to opts.Audit: the database role, the version before and after, what
// was applied or rolled back, and the result: applied, refused (a down
// that rolled nothing back, or stopped by a table that holds rows) or
// failed (any other error, with what was done before it).
func auditedMigration(ctx context.Context, db *sql.DB, p *migrate.Provider, opts *MigrateOpts) error {
	line := ops.AuditLine{Action: "migrate-" + string(opts.Command), OperatorReason: opts.Reason}
	if opts.Audit != nil {
		_ = db.QueryRowContext(ctx, `SELECT current_user::text`).Scan(&line.DBRole)
		// Status takes no lock: the version it reads is the one the
		// run starts from unless another run is applying migrations.
		if st, err := p.Status(ctx); err == nil {
			line.From = fmt.Sprint(st.Version)
		}
	}
	var ran migrateRun
	err := runMigrateCommand(ctx, p, opts.Command, opts.Out, opts.LockTimeout, &ran)
	if ran.res != nil {
		line.To = fmt.Sprint(ran.res.Version)
		line.Detail = migrateDetail(opts.Command, ran.res)
	}
	var dataLoss *migrate.DataLossError
	switch {
	case err == nil && ran.refused != "":
		line.Result, line.Reason = ops.OutcomeRefused, ran.refused
	case err == nil:
		line.Result = ops.OutcomeApplied
	case errors.As(err, &dataLoss):
		line.Result, line.Reason = ops.OutcomeRefused, redact.Text(err.Error(), opts.DatabaseURL)
	default:
		line.Result, line.Reason = ops.OutcomeFailed, redact.Text(err.Error(), opts.DatabaseURL)
	}
	writeAudit(ctx, opts.Audit, line)
	return err
}

// migrateDetail names the migrations res applied (up) or rolled back
// (down).
func migrateDetail(cmd MigrateCommand, res *migrate.Result) string {
	var names []string
	for _, m := range res.Applied {
		if m != nil && m.Source != nil {
			names = append(names, fmt.Sprint(m.Source.Version))
		}
	}
	verb := "applied"
	if cmd == MigrateDown {
		verb = "rolled back"
	}
	detail := verb + " none"
	if len(names) > 0 {
		detail = verb + " " + strings.Join(names, ", ")
	}
	if res.Baseline {
		detail += fmt.Sprintf("; recorded the seed %d without running it", migrate.SeedVersion)
	}
	return detail
}
