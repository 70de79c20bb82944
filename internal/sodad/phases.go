package sodad

import "time"

// phases times the steps of one method call for sodad's debug log
// (--verbose): where a CreateSandbox spends its time, measured rather
// than guessed.
type phases struct {
	last  time.Time
	start time.Time
	steps []any // name, duration pairs, in order
}

func newPhases() *phases {
	now := time.Now()
	return &phases{start: now, last: now}
}

// mark ends the step called name at the current time.
func (p *phases) mark(name string) {
	now := time.Now()
	p.steps = append(p.steps, name, now.Sub(p.last))
	p.last = now
}

// attrs are the steps as slog attributes, the total last.
func (p *phases) attrs() []any {
	return append(p.steps, "total", p.last.Sub(p.start))
}
