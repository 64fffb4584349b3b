"""Tables the integration tests of one-process modes (run, run --direct) share."""

USERS = {"users": {"keys": ["user:{id}", "user:email:{email}"]}}
USERS_DDL = ("CREATE TABLE users (id BIGINT PRIMARY KEY, email VARCHAR(190) NOT NULL, "
             "name VARCHAR(100) NOT NULL)")
