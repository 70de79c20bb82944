package systemd

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// Notifier sends sd_notify(3) messages to the service manager. The zero
// value is ready to use; without $NOTIFY_SOCKET every call does nothing.
type Notifier struct {
	log *slog.Logger
}

// NewNotifier returns a Notifier that logs send failures to log.
func NewNotifier(log *slog.Logger) *Notifier { return &Notifier{log: log} }

func (n *Notifier) send(state string) {
	if _, err := daemon.SdNotify(false, state); err != nil && n.log != nil {
		n.log.Warn("sd_notify", "state", state, "err", err)
	}
}

// Ready reports READY=1 with a status line.
func (n *Notifier) Ready(status string) { n.send("READY=1\nSTATUS=" + status) }

// Status updates the STATUS= line shown by systemctl status.
func (n *Notifier) Status(status string) { n.send("STATUS=" + status) }

// Stopping reports STOPPING=1 with a status line.
func (n *Notifier) Stopping(status string) { n.send("STOPPING=1\nSTATUS=" + status) }

// Watchdog pings the watchdog at half the interval the unit set with
// WatchdogSec= until ctx is done. healthy is asked before each ping; a
// false answer skips the ping, so systemd restarts a wedged daemon.
func (n *Notifier) Watchdog(ctx context.Context, healthy func() bool) error {
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		return fmt.Errorf("watchdog: %w", err)
	}
	if interval == 0 {
		return nil
	}
	t := time.NewTicker(interval / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if healthy == nil || healthy() {
				n.send("WATCHDOG=1")
			}
		}
	}
}
