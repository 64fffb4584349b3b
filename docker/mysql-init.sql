-- MySQL 8.4 (compose profile `mysql`): the same accounts and grants as
-- docker/mariadb-init.sql and devstack/stack.sh. mysql_native_password because
-- PyMySQL's caching_sha2 full authentication needs TLS or an RSA key exchange.
CREATE DATABASE IF NOT EXISTS cachesync;
CREATE DATABASE IF NOT EXISTS demo;
CREATE USER IF NOT EXISTS 'cachesync'@'%' IDENTIFIED WITH mysql_native_password BY 'cachesync-demo-password';
GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'cachesync'@'%';
GRANT SELECT ON demo.* TO 'cachesync'@'%';
GRANT SELECT, INSERT, UPDATE, DELETE, CREATE ON cachesync.* TO 'cachesync'@'%';
CREATE TABLE IF NOT EXISTS demo.users (
  id BIGINT PRIMARY KEY, email VARCHAR(190) NOT NULL, name VARCHAR(100) NOT NULL,
  updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6));
CREATE TABLE IF NOT EXISTS demo.orders (
  id BIGINT PRIMARY KEY, user_id BIGINT NOT NULL, total_cents INT NOT NULL);
