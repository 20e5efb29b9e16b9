#!/usr/bin/env bash
# The tests that read the calendar, run with the whole process's clock set to instants where a
# calendar rule turns (libfaketime; Debian's `faketime`): the demo's seeded windows and history,
# quota windows and their calendar, usage by day and month, fair share's decay, what-ifs over the
# last days. CI runs at whatever hour it is started; a test that holds only at most hours fails
# there one day in a hundred. Each instant starts the clock there and lets it run on.
#
#   scripts/time_sweep.sh [INSTANT ...] [-- PYTEST ARGS]
#
# INSTANT is what faketime takes ("2027-03-28 00:30:00", UTC); without one, the instants below.
# On SQLite unless DATABASE_URL is set (scripts/services.sh up prints the environment of make test).
# Prints one line per instant and exits 1 when any failed; each instant's output stays in the
# folder it names.
set -euo pipefail
cd "$(dirname "$0")/.."

instants=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do instants+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
if [ ${#instants[@]} -eq 0 ]; then
  instants=(
    "2026-12-07 00:02:13"  # a Monday's small hours in UTC: "next Monday" is a week away
    "2026-12-06 23:30:00"  # a Sunday's last half hour in UTC, already Monday in Berlin
    "2026-12-31 23:50:00"  # a month's and a year's last minutes
    "2027-03-28 00:30:00"  # half an hour before Berlin's clocks go forward (01:00 UTC)
    "2027-10-30 23:40:00"  # the night Berlin's clocks go back (01:00 UTC)
    "2028-02-29 12:00:00"  # a leap day
  )
fi
if ! command -v faketime >/dev/null; then
  echo "time_sweep: needs faketime (apt-get install faketime)" >&2
  exit 2
fi
tests=(tests/demo tests/accounting tests/frontend tests/why tests/custody/test_demo.py tests/fair_share
       tests/quotas tests/cli/test_demo_portal.py tests/whatifs)
out=$(mktemp -d -t time-sweep.XXXX)
failed=0
for instant in "${instants[@]}"; do
  log="$out/$(echo "$instant" | tr -c '0-9\n' '-').log"
  if TZ=UTC GPUPORTAL_DEBUG=true faketime "$instant" .venv/bin/python -m pytest -q -p no:cacheprovider \
      -m "not pure and not apart" "${tests[@]}" "$@" >"$log" 2>&1; then
    echo "at $instant: passed ($(tail -n 1 "$log"))"
  else
    failed=1
    echo "at $instant: FAILED ($(tail -n 1 "$log"))"
    grep '^FAILED' "$log" | sed 's/^/  /' || true
  fi
done
echo "time_sweep: output in $out"
exit $failed
