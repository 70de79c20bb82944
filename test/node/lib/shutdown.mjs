import assert from 'node:assert/strict';
import { shutdownBridge } from './harness.mjs';

/**
 * Body of the last test of every file: close all clients (DELETE their
 * sessions), SIGTERM the bridge, and require that none of the
 * server-everything children it spawned (found by the per-bridge marker
 * argument via `pgrep -f`) is still alive.
 */
export async function assertCleanShutdown(bridge) {
  assert.ok(bridge, 'bridge was never started');
  const before = bridge.childPids();
  const { exit, leftover } = await shutdownBridge(bridge);
  assert.deepEqual(
    leftover,
    [],
    `children still running after soda-mcpd exited (exit=${JSON.stringify(exit)}, ` +
      `children before shutdown: ${JSON.stringify(before)})`,
  );
  // A clean SIGTERM shutdown should not look like a crash.
  assert.ok(
    exit.signal === 'SIGTERM' || exit.code === 0 || exit.code === 143,
    `unexpected soda-mcpd exit after SIGTERM: ${JSON.stringify(exit)}; stderr tail:\n` +
      bridge.stderrLines.slice(-10).join('\n'),
  );
}
