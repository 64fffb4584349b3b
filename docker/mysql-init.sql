-- MySQL 8.4 (compose profile `mysql`): the same accounts and grants as
-- docker/mariadb-init.sql and devstack/stack.sh. caching_sha2_password, MySQL 8.4's default
-- (mysql_native_password is off in 8.4 and removed in 9.0): PyMySQL's full authentication
-- sends the password over TLS or, on plain text, RSA-encrypted with the server's public key,
-- which needs the `cryptography` package (in the sidecar extra).
CREATE DATABASE IF NOT EXISTS cachesync;
CREATE DATABASE IF NOT EXISTS demo;
CREATE USER IF NOT EXISTS 'cachesync'@'%' IDENTIFIED WITH caching_sha2_password BY 'cachesync-demo-password';
GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'cachesync'@'%';
GRANT SELECT ON demo.* TO 'cachesync'@'%';
GRANT SELECT, INSERT, UPDATE, DELETE, CREATE ON cachesync.* TO 'cachesync'@'%';
CREATE TABLE IF NOT EXISTS demo.users (
  id BIGINT PRIMARY KEY, email VARCHAR(190) NOT NULL, name VARCHAR(100) NOT NULL,
  updated_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6));
CREATE TABLE IF NOT EXISTS demo.orders (
  id BIGINT PRIMARY KEY, user_id BIGINT NOT NULL, total_cents INT NOT NULL);
