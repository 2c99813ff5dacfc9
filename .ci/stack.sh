# Sourced by the conformance scripts: start the example project on a fresh PostgreSQL
# database (runserver and the reaper), and stop what was started when the script exits.
# Needs PY, PG_HOST, PG_PORT, PG_USER and LOG_DIR.

pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT

# start_stack NAME DB PORT: migrate a fresh database, start the server and the reaper.
start_stack() {
    local name=$1 db=$2 port=$3
    local url="postgres://$PG_USER@$PG_HOST:$PG_PORT/$db"
    "$PY" - "$PG_HOST" "$PG_PORT" "$PG_USER" "$db" <<'EOF'
import sys
import psycopg
from psycopg import sql
host, port, user, name = sys.argv[1:]
with psycopg.connect(host=host, port=int(port), user=user, dbname="postgres", autocommit=True) as c:
    c.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
EOF
    DATABASE_URL=$url "$PY" manage.py migrate --noinput --skip-checks -v0
    DATABASE_URL=$url "$PY" manage.py runserver "127.0.0.1:$port" --noreload \
        >"$LOG_DIR/$name-server.log" 2>&1 &
    pids+=($!)
    DATABASE_URL=$url "$PY" manage.py ojs_reaper >"$LOG_DIR/$name-reaper.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 1 100); do
        if "$PY" -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$port/ojs/v1/health', timeout=2)" 2>/dev/null; then
            return 0
        fi
        sleep 0.2
    done
    echo "ERROR: the $name server on port $port did not become healthy:" >&2
    tail -20 "$LOG_DIR/$name-server.log" >&2
    return 1
}
