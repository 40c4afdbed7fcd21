#!/usr/bin/env bash
# Starts every local service the tests use that is not answering, and waits for it.
# With CI set, a service that cannot be started fails the run; otherwise it is reported
# and the tests that need it skip.
set -u

check() { # name host port
	timeout 1 bash -c "exec 3<>/dev/tcp/$2/$3" 2>/dev/null
}

start() { # name command...
	local name=$1; shift
	echo "services: starting $name"
	"$@" >/dev/null 2>&1 || true
}

wait_for() { # name host port seconds
	local i
	for ((i = 0; i < $4 * 10; i++)); do
		check "$1" "$2" "$3" && return 0
		sleep 0.1
	done
	return 1
}

failed=0
ensure() { # name host port seconds command...
	local name=$1 host=$2 port=$3 secs=$4; shift 4
	if check "$name" "$host" "$port"; then return; fi
	start "$name" "$@"
	if wait_for "$name" "$host" "$port" "$secs"; then
		echo "services: $name is up"
	else
		echo "services: $name is DOWN at $host:$port" >&2
		failed=1
	fi
}

ensure PostgreSQL 127.0.0.1 5432 60 bash -c 'pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start'
ensure MariaDB 127.0.0.1 3306 60 start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
ensure RabbitMQ 127.0.0.1 5672 120 rabbitmq-server -detached
ensure NATS 127.0.0.1 4222 30 start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log

# pgbouncer_start installs Debian's pgbouncer if missing, writes its configuration from
# scripts/pgbouncer.ini and starts it as the postgres user (it refuses to run as root).
pgbouncer_start() {
	if ! dpkg -s pgbouncer >/dev/null 2>&1; then
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer || return 1
	fi
	local dir=/tmp/outboxer-pgbouncer
	mkdir -p "$dir" && chown postgres "$dir" || return 1
	sed "s|@DIR@|$dir|g" "$(dirname "$0")/pgbouncer.ini" >"$dir/pgbouncer.ini"
	echo '"postgres" ""' >"$dir/userlist.txt"
	chown postgres "$dir"/* && runuser -u postgres -- pgbouncer -d -q "$dir/pgbouncer.ini"
}

ensure PgBouncer 127.0.0.1 6432 30 pgbouncer_start

if [ "$failed" = 1 ] && [ -n "${CI:-}" ]; then
	echo "services: a service the tests need is down (CI is set: failing)" >&2
	exit 1
fi
exit 0
