// Runs once, on the mongo service's first start (empty data volume), as the root user:
// the worker's own user, allowed to read and write the durable_agent database only.
const env = process.env;
db.getSiblingDB("admin").createUser({
  user: env.DURABLE_AGENT_DB_USER,
  pwd: env.DURABLE_AGENT_DB_PASSWORD,
  roles: [{ role: "readWrite", db: "durable_agent" }],
});
