package sodad

import "github.com/soda-project/soda/internal/sodadapi"

// Operations on an existing sandbox: the polkit action its owner needs
// ("" for none) and the one anyone else needs.
type operation struct{ own, other string }

// The operations on an existing sandbox.
var (
	opExec      = operation{sodadapi.ActionExec, sodadapi.ActionExecOther}
	opKill      = operation{sodadapi.ActionKill, sodadapi.ActionKillOther}
	opReadAudit = operation{sodadapi.ActionReadAudit, sodadapi.ActionReadAuditOther}
	// opRevoke only narrows what the sandbox reaches: its owner needs
	// nothing.
	opRevoke = operation{"", sodadapi.ActionGrantOther}
)
