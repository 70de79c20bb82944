// Package sandboxsession keeps persistent sandbox sessions for agents (not
// to be confused with an MCP session of package mcpbridge): each one
// a live sandbox (a real OS sandbox, package sandbox or sodad) with a
// private workspace that the agent seeds with a baseline, runs commands in
// again and again, reads and writes, diffs against the baseline, resets
// and closes. It is the module behind `sodactl sandbox mcp` (package
// sessionmcp is its MCP adapter).
//
// The host never touches a workspace's files: the workspace is a tmpfs
// inside the sandbox (its size is the kernel-enforced quota), and every
// file operation is a tar stream to or from a command run in the sandbox,
// parsed here as untrusted input (bounded, names checked). A symlink an
// agent plants can therefore never lead the host anywhere. The baseline
// is kept here, in memory.
//
// Calls on one session run one at a time; a call either completes or
// leaves the workspace as the last completed call did (a failed write of
// several files is undone from the files' previous contents). Sessions
// are never persisted: they end with the Manager, leaving nothing.
package sandboxsession
