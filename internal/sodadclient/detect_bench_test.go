package sodadclient_test

import (
	"context"
	"testing"
	"time"

	"github.com/soda-project/soda/internal/sodadclient"
	"github.com/soda-project/soda/internal/sodadclient/sodadtest"
)

// BenchmarkDetectAbsent is what every sodactl run without --direct pays
// on a host whose system bus has no sodad: connect, NameHasOwner,
// ListActivatableNames.
func BenchmarkDetectAbsent(b *testing.B) {
	b.Setenv("DBUS_SYSTEM_BUS_ADDRESS", sodadtest.StartBus(b, false))
	for b.Loop() {
		c, ok, err := sodadclient.Detect(context.Background(), 5*time.Second)
		if err != nil || ok {
			b.Fatalf("Detect = %v, %v", ok, err)
		}
		c.Close()
	}
}
