#!/bin/sh
# Demo writer: inserts, renames and deletes users forever, one change per second.
set -eu
i=1
while true; do
  mariadb -h mariadb -uroot -p"$MARIADB_ROOT_PASSWORD" demo -e "
    INSERT INTO users (id, email, name) VALUES ($i, 'u$i@example.com', 'user $i');
    UPDATE users SET email = 'u$i.new@example.com' WHERE id = $i;
    DELETE FROM users WHERE id = $((i - 5));"
  i=$((i + 1))
  sleep 1
done
