# test/e2e/e2e.mk: soda's end-to-end tests on a real systemd (test/e2e).
# Included by the Makefile; standalone: make -f Makefile -f test/e2e/e2e.mk test-e2e
#
#   make test-e2e   build the .deb (packaging.mk) and the fixtures, boot
#                   systemd 252 in a throw-away box (test/box/sdbox), install
#                   the package there and run every check (about 30 s; the
#                   sodad host-load test, about a minute more); then
#                   the sandbox suite (test/sandbox: the escape battery as
#                   root and as a user, egress, an MCP agent, the real
#                   Claude Code CLI (npm ci of test/sandbox/claude-code), a dev
#                   workload, limits, host responsiveness under a fork bomb
#                   and a CPU burner, private tmpfs memory, fail-closed;
#                   about 2 min) in a second
#                   box. At most 8 min. Skipped, with the reason, when not root or
#                   when "test/box/sdbox check" finds something missing (under
#                   CI=true that is a failure).
#
# Nothing leaves the box's own loopback; the box is torn down on every path
# (an interrupted run is cleaned up by the next one). The figures go to
# test/e2e/results.md.

GO ?= go
E2E_REPO := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))/../..)
E2E_BOX  := $(E2E_REPO)/test/box/sdbox

.PHONY: test-e2e

test-e2e:
	@skip=0; [ "$$CI" = true ] && skip=1; \
	if [ "$$(id -u)" != 0 ]; then \
		echo "test-e2e: SKIP: needs root (the box boots systemd as PID 1 in its own namespaces)"; \
		[ $$skip = 0 ] || echo "test-e2e: FAILED: under CI=true the end-to-end tests must run"; exit $$skip; \
	fi; \
	if ! $(E2E_BOX) check >/dev/null 2>&1 && ! $(E2E_BOX) check --cgroup hybrid >/dev/null 2>&1; then \
		echo "test-e2e: SKIP: test/box/sdbox check:"; $(E2E_BOX) check; \
		[ $$skip = 0 ] || echo "test-e2e: FAILED: under CI=true the end-to-end tests must run"; exit $$skip; \
	fi; \
	case "$(E2E_REPO)/" in /tmp/*|/var/tmp/*) \
		copy=/var/lib/soda-e2e.$$$$; echo "test-e2e: $(E2E_REPO) is under a PrivateTmp path; running from a copy in $$copy"; \
		rm -rf $$copy && cp -a $(E2E_REPO) $$copy && \
		{ $(MAKE) -C $$copy test-e2e; rc=$$?; rm -rf $$copy; exit $$rc; } ;; \
	esac; \
	$(MAKE) -C $(E2E_REPO) -f Makefile deps-test && \
	cd $(E2E_REPO) && SODA_E2E=1 $(GOTESTV) -count=1 -timeout 8m ./test/e2e/ ./test/sandbox/
