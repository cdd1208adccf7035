package cli

import "github.com/knowledgefs/kfsdb/cmd/kfsdb/cmdkit"

// The commands' output helpers are the command kit's (cmdkit.PrintRow,
// cmdkit.WriteJSON), under the names this package's commands call them by.
var (
	printRow  = cmdkit.PrintRow
	writeJSON = cmdkit.WriteJSON
)
