#!/bin/sh
# Demo writer: inserts, renames and deletes users forever, one change per second.
# DB_CLIENT/DB_HOST pick the server (mariadb by default; the mysql profile uses mysql).
set -eu
client="${DB_CLIENT:-mariadb}"
host="${DB_HOST:-mariadb}"
i=1
while true; do
  "$client" -h "$host" -uroot -p"$DB_ROOT_PASSWORD" demo -e "
    INSERT INTO users (id, email, name) VALUES ($i, 'u$i@example.com', 'user $i');
    UPDATE users SET email = 'u$i.new@example.com' WHERE id = $i;
    DELETE FROM users WHERE id = $((i - 5));"
  i=$((i + 1))
  sleep 1
done
