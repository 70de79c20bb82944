package testkit

import (
	"encoding/json"
	"fmt"
	"os"
)

// Outcome is one test's result as test/skipreport records it: a JSON line
// in the file SODA_SKIPS names.
type Outcome struct {
	Package string `json:"package"`
	Test    string `json:"test"`
	// Action is pass, fail or skip.
	Action string `json:"action"`
	// Reason is a skip's message.
	Reason string `json:"reason,omitempty"`
}

// RecordOutcomes appends outs to the file SODA_SKIPS names, when it is
// set: the outcomes of tests that a test ran itself, in a box (a test
// binary go test does not see), so that skipreport counts them too.
func RecordOutcomes(outs []Outcome) error {
	path := os.Getenv("SODA_SKIPS")
	if path == "" || len(outs) == 0 {
		return nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("record test outcomes: %w", err)
	}
	enc := json.NewEncoder(f)
	for _, o := range outs {
		if err := enc.Encode(o); err != nil {
			f.Close()
			return fmt.Errorf("record test outcomes in %s: %w", path, err)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("record test outcomes in %s: %w", path, err)
	}
	return nil
}
