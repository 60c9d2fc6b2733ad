// ioredis_writer.js -- ioredis's cluster client, unmodified, writing while
// the test fails its primary over (tests/python/test_replication.py,
// test_ioredis_rides_through_a_failover).
//
//   NODE_PATH=<a node_modules holding ioredis> node ioredis_writer.js PROGRESS PORT...
//
// Writes io:<i> = v<i> in order, one at a time, with the client's default
// options (seeds: the ports given). A write that fails is written again, as
// an application would; each acknowledged one moves the count on. After
// every write the count and the errors seen so far go to PROGRESS (a file,
// rewritten) as "acked errors". SIGTERM ends it after the write in flight.
// ioredis is not a Debian package, so the test runs this only where one is
// installed.
"use strict";
const fs = require("fs");
const Redis = require("ioredis");

const [progress, ...ports] = process.argv.slice(2);
const cluster = new Redis.Cluster(ports.map((p) => ({ host: "127.0.0.1", port: Number(p) })));
let stop = false;
process.on("SIGTERM", () => { stop = true; });

(async () => {
  let acked = 0, errors = 0;
  while (!stop) {
    try {
      const r = await cluster.set(`io:${acked}`, `v${acked}`);
      if (r !== "OK") throw new Error(`SET answered ${r}`);
      acked++;
    } catch (e) {
      errors++;
      await new Promise((res) => setTimeout(res, 50));
    }
    fs.writeFileSync(progress + ".tmp", `${acked} ${errors}\n`);
    fs.renameSync(progress + ".tmp", progress);
    await new Promise((res) => setTimeout(res, 2));
  }
  cluster.disconnect();
})();
