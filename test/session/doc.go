// Package session tests `sodactl sandbox mcp` through the real
// subprocess: the go-sdk client (and, in test/node, the TypeScript SDK's)
// drives the ten sandbox_* tools against real OS sandboxes.
package session
