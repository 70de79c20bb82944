# packaging.mk: the .deb and .rpm of soda, built with nfpm from nfpm.yaml.
# Included by the Makefile; standalone: make -f Makefile -f packaging.mk deb
#
#   make deb             dist/soda_$(SODA_VERSION)_amd64.deb
#   make rpm             dist/soda-$(SODA_VERSION).x86_64.rpm
#   make packages        both
#   make check-packages  both, then check they hold the same files (rpm(8)
#                        is installed from apt when missing)
#   make check-units     systemd-analyze verify on every unit (and on
#                        soda-sandbox.slice with soda-generator's drop-in),
#                        and the offline security rating of the service (<= 2.5)

SODA_VERSION ?= 0.1.0
export SODA_VERSION

# nfpm, pinned as a tool dependency in tools/go.mod, a module of its own
# apart from the product's (its version and sums are in tools/go.mod and
# tools/go.sum; go tool builds it once and caches it).
NFPM := $(GO) tool -modfile=tools/go.mod nfpm

DEB := dist/soda_$(SODA_VERSION)_amd64.deb
RPM := dist/soda-$(SODA_VERSION).x86_64.rpm

# Man pages as packaged: rendered (man/%: man/%.md in the Makefile), then
# gzipped reproducibly (-n: no name or time stamp).
PKG_MAN_PAGES := sodactl.1 soda.conf.5 soda.7 soda-mcpd.8 soda-generator.8 soda-profile.5 sodad.8 soda-validated.8
PKG_MANS      := $(addprefix dist/stage/man/,$(addsuffix .gz,$(PKG_MAN_PAGES)))

PKG_INPUTS := bin/soda-mcpd bin/sodactl bin/sodactl-full bin/soda-sandbox-init bin/soda-generator bin/sodad bin/soda-validated $(PKG_MANS) nfpm.yaml \
	$(wildcard units/* packaging/*/* packaging/*/*/* polkit/*) README.md

.PHONY: deb rpm packages check-packages check-units

packages: deb rpm

deb: $(DEB)
rpm: $(RPM)

$(DEB): $(PKG_INPUTS)
	@mkdir -p $(@D)
	$(NFPM) package --config nfpm.yaml --packager deb --target $@

$(RPM): $(PKG_INPUTS)
	@mkdir -p $(@D)
	$(NFPM) package --config nfpm.yaml --packager rpm --target $@

# Keep the rendered pages: make would delete them as intermediate files.
.SECONDARY: $(addprefix man/,$(PKG_MAN_PAGES))

dist/stage/man/%.gz: man/%
	@mkdir -p $(@D)
	gzip -9n <$< >$@

# The same files, with the same modes, in both packages (directories aside:
# the .deb lists every parent directory, the .rpm only the ones it owns).
check-packages: $(DEB) $(RPM)
	@command -v rpm >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends rpm >/dev/null; }
	@dpkg-deb -c $(DEB) | awk '$$1 !~ /^d/ { sub(/^\./, "", $$6); print $$1, $$6 }' | sort >dist/files.deb
	@rpm -qp --qf '[%{FILEMODES:perms} %{FILENAMES}\n]' $(RPM) 2>/dev/null | awk '$$1 !~ /^d/' | sort >dist/files.rpm
	@if ! diff -u dist/files.deb dist/files.rpm; then \
		echo "check-packages: $(DEB) and $(RPM) differ (- deb, + rpm)" >&2; exit 1; fi
	@test -s dist/files.deb || { echo "check-packages: no files in $(DEB)" >&2; exit 1; }
	@echo "check-packages: $(DEB) and $(RPM) hold the same $$(wc -l <dist/files.deb) files"

# systemd-analyze verify, offline, in a throw-away root holding the host's
# units, ours, soda-mcpd (verify checks ExecStart=) and our man pages
# (verify checks Documentation=man:...). Then the service's exposure rating
# (systemd-analyze security, offline; 25 means 2.5).
SYSTEMD_UNIT_DIR   ?= /lib/systemd/system
SECURITY_THRESHOLD ?= 25
check-units: bin/soda-mcpd bin/sodad bin/soda-generator $(PKG_MANS)
	@command -v systemd-analyze >/dev/null || { echo "check-units: systemd-analyze missing (apt-get install systemd)" >&2; exit 1; }
	@root=$$(mktemp -d) && trap 'rm -rf "$$root"' EXIT && \
	mkdir -p "$$root/usr/lib/systemd/system" "$$root/usr/bin" "$$root/gen" "$$root/etc-systemd" && \
	cp -r $(SYSTEMD_UNIT_DIR)/. "$$root/usr/lib/systemd/system/" && \
	cp units/* "$$root/usr/lib/systemd/system/" && cp bin/soda-mcpd bin/sodad "$$root/usr/bin/" && \
	SODA_CONFIG_DIR="$$root/gen" SODA_VALIDATE_DIR="$$root/gen" SODA_SYSTEMD_ETC_DIR="$$root/etc-systemd" SYSTEMD_SCOPE=system \
		bin/soda-generator "$$root/gen" && \
	test -f "$$root/gen/soda-sandbox.slice.d/00-soda-cpu-quota.conf" && \
	cp -r "$$root/gen/soda-sandbox.slice.d" "$$root/usr/lib/systemd/system/" && \
	for f in $(PKG_MANS); do b=$$(basename $$f .gz); d="$$root/usr/share/man/man$${b##*.}"; \
		mkdir -p "$$d" && cp $$f "$$d/" || exit 1; done && \
	MANPATH="$$root/usr/share/man" systemd-analyze verify --root="$$root" \
		soda-mcp@check.socket soda-mcp@check.service soda-mcp.slice soda-sandbox.slice soda.slice sodad.service && \
	{ out=$$(MANPATH="$$root/usr/share/man" systemd-analyze verify --root="$$root" soda-sandbox.slice 2>&1); \
	  [ -z "$$out" ] || { echo "check-units: soda-sandbox.slice with soda-generator's drop-in:"; echo "$$out"; exit 1; }; } && \
	echo "check-units: systemd-analyze verify passed" && \
	{ out=$$(systemd-analyze security --offline=yes --root="$$root" --threshold=$(SECURITY_THRESHOLD) \
		--no-pager soda-mcp@check.service 2>&1); rc=$$?; echo "$$out" | tail -n 1; \
	  [ $$rc -eq 0 ] || { echo "check-units: exposure above $(SECURITY_THRESHOLD)/10:"; echo "$$out" | grep '✗'; exit 1; }; }
