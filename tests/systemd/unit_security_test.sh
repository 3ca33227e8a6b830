#!/usr/bin/env bash
# gp-agent.service's sandboxing, scored by systemd itself:
#
#   tests/systemd/unit_security_test.sh UNIT_TEMPLATE
#
# Fills in the template's paths, then checks that `systemd-analyze security --offline` rates its overall exposure
# at 3.0 or below (the template scored 9.6, "UNSAFE", before its sandboxing options; 2.6 with them) and that the
# options the agent's isolation relies on are there, so that a lower score won by other options cannot hide the
# loss of one of them.
set -euo pipefail

if (($# != 1)); then
  echo "usage: $0 UNIT_TEMPLATE" >&2
  exit 2
fi
tmp="$(mktemp -d "${TMPDIR:-/tmp}/gpupool-unit-test.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
unit="$tmp/gp-agent.service"
sed -e 's|@GPUPOOL_UNIT_BINDIR@|/usr/local/bin|' -e 's|@GPUPOOL_UNIT_SYSCONFDIR@|/etc|' "$1" >"$unit"

failures=0
fail() {
  echo "unit_security_test: FAIL: $*" >&2
  failures=$((failures + 1))
}
for option in NoNewPrivileges=yes ProtectSystem=strict ProtectHome=yes PrivateTmp=yes DevicePolicy=closed \
  ProtectKernelTunables=yes ProtectKernelModules=yes ProtectControlGroups=yes RestrictNamespaces=yes \
  RestrictSUIDSGID=yes LockPersonality=yes SystemCallArchitectures=native 'SystemCallFilter=@system-service' \
  'RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6' 'CapabilityBoundingSet=CAP_SETUID CAP_SETGID CAP_KILL'; do
  grep -qxF "$option" "$unit" || fail "gp-agent.service lacks $option"
done
report="$(systemd-analyze security --offline=true "$unit" 2>&1)" || true
score="$(sed -n 's/.*Overall exposure level for gp-agent.service: \([0-9.]*\).*/\1/p' <<<"$report")"
if [[ -z "$score" ]]; then
  echo "$report" >&2
  fail "systemd-analyze security gave no exposure level"
elif ! awk -v s="$score" 'BEGIN { exit !(s <= 3.0) }'; then
  echo "$report" >&2
  fail "exposure level $score is above 3.0"
else
  echo "unit_security_test: exposure level $score (at most 3.0)"
fi
((failures == 0)) || exit 1
echo "unit_security_test: passed"
