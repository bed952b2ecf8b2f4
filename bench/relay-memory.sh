#!/usr/bin/env bash
# relay-memory.sh TX_ROWS [polling|cdc]: the peak resident memory of an `outbox relay` process (measured with
# /usr/bin/time -v) while it drains 100,000 rows written beforehand by plain SQL in transactions of TX_ROWS rows,
# PostgreSQL -> NATS JetStream. Compare TX_ROWS=100000 (one transaction) with TX_ROWS=1000: the relay's memory
# should not grow with the size of a transaction. The writer is psql, so only the relay's memory is measured.
# Needs the services of shared/SERVICES.md (PostgreSQL with wal_level = logical for cdc). Cleans up after itself.
set -euo pipefail
TX=${1:?usage: relay-memory.sh TX_ROWS [polling|cdc]}
SRC=${2:-cdc}
N=${ROWS:-100000}
PG=${OUTBOX_TEST_POSTGRES:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
NATS=${OUTBOX_TEST_NATS:-nats://127.0.0.1:4222}
T=memtest_$$
dir=$(mktemp -d)
O=$dir/outbox
q() { psql "$PG" -Atqc "$1"; }
cleanup() {
	[ "$SRC" = cdc ] && "$O" cdc drop-slot --db "$PG" --table "$T" --yes --drop-publication >/dev/null 2>&1 || true
	q "DROP TABLE IF EXISTS $T" || true
	rm -rf "$dir"
}
trap cleanup EXIT
(cd "$(dirname "$0")/.." && go build -o "$O" ./cmd/outbox)
flags=()
[ "$SRC" = cdc ] && flags=(--cdc)
"$O" migrate --db "$PG" --table "$T" "${flags[@]}" >/dev/null
for ((i = 0; i < N; i += TX)); do
	q "INSERT INTO $T (message_id, aggregate_type, aggregate_id, event_type, payload)
	   SELECT 'm-$$-' || g, 'order', 'o-' || (g % 10000), 'ORDER_PAID',
	          jsonb_build_object('order_id', 'o-' || g, 'amount_cents', 1000 + g % 900, 'currency', 'EUR')
	   FROM generate_series($i, $((i + TX - 1))) g WHERE g < $N"
done
/usr/bin/time -v -o "$dir/time" "$O" relay --db "$PG" --table "$T" --source "$SRC" --broker "$NATS" \
	--archive-every 0 --log-level warn 2>"$dir/log" &
pid=$!
start=$(date +%s.%N)
until [ "$(q "SELECT count(*) FROM $T WHERE status = 0")" = 0 ]; do sleep 0.2; done
end=$(date +%s.%N)
kill -TERM "$(pgrep -P "$pid")"
wait "$pid" || true
printf 'tx_rows=%s source=%s rows=%s drain_s=%.2f peak_rss_mb=%.0f\n' "$TX" "$SRC" "$N" "$(echo "$end - $start" | bc)" \
	"$(echo "$(grep 'Maximum resident' "$dir/time" | awk '{print $NF}') / 1024" | bc -l)"
