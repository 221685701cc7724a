// A reviewer's script in Node: wait for the user's pending memories and approve them.
//
//   node review_pending.mjs
//
// Environment: PMEM_URL, PMEM_REVIEWER_TOKEN (an admin's or team admin's JWT: `pmem token --role
// admin`), PMEM_USER_ID (whose memories), PMEM_REVIEW_WAIT_S (how long to wait for one, default 30).
// Prints one JSON line per approved memory.
import { MemoryClient } from "persona-memory-client";

const env = process.env;
const reviewer = new MemoryClient({ baseUrl: env.PMEM_URL ?? "http://127.0.0.1:8080", credential: env.PMEM_REVIEWER_TOKEN });
const deadline = Date.now() + Number(env.PMEM_REVIEW_WAIT_S ?? "30") * 1000;

let items = [];
while (items.length === 0) {
  items = (await reviewer.reviewQueue({ user_id: env.PMEM_USER_ID })).items;
  if (items.length === 0) {
    if (Date.now() > deadline) throw new Error("nothing pending for this user yet");
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}
for (const item of items) {
  const memory = await reviewer.approve(item.id);
  console.log(JSON.stringify({ key: memory.key, value: memory.value, status: memory.status }));
}
