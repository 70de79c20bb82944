package mcpbridge

import "time"

// SetInputBounds changes the input translation's lifetime of a held call
// and its cap on calls, for tests.
func SetInputBounds(b *Bridge, ttl time.Duration, maxCalls int) {
	b.inputs.mu.Lock()
	defer b.inputs.mu.Unlock()
	if ttl > 0 {
		b.inputs.ttl = ttl
	}
	if maxCalls > 0 {
		b.inputs.maxCalls = maxCalls
	}
}

// InputCounts reports the input translation's live calls, unused states
// and held child requests, for tests.
func InputCounts(b *Bridge) (calls, states, held int) {
	b.inputs.mu.Lock()
	defer b.inputs.mu.Unlock()
	return len(b.inputs.calls), len(b.inputs.states), len(b.inputs.held)
}
