// The client against a running `pmem serve` (PMEM_TEST_URL, a service key and tokens from the test
// that starts it: tests/client/test_typescript_client.py).
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { MemoryClient, MemoryApiError } from "../dist/index.js";

const env = process.env;
const skip = env.PMEM_TEST_URL ? false : "PMEM_TEST_URL is not set (the pytest test starts the server)";
const TEAM = env.PMEM_TEST_TEAM_ID;
const USER = env.PMEM_TEST_USER_ID;

function client(credential) {
  return new MemoryClient({ baseUrl: env.PMEM_TEST_URL, credential, retry: { maxAttempts: 1 } });
}

async function failure(promise) {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof MemoryApiError, String(error));
    return error;
  }
  assert.fail("no error");
}

test("a save waits for review, is approved, then recalled and hinted", { skip }, async () => {
  const service = client(env.PMEM_TEST_SERVICE_KEY);
  const admin = client(env.PMEM_TEST_ADMIN_TOKEN);
  const me = client(env.PMEM_TEST_USER_TOKEN);
  const team = await admin.putSettings("team", { review_tool_saves: true }, TEAM);
  assert.equal(team.own.review_tool_saves, true);
  const tools = await service.tools();
  assert.deepEqual(tools.slice(0, 2).map((tool) => tool.function.name), ["memory_save", "memory_recall"]);
  const saved = await service.callTool({
    name: "memory_save",
    arguments: JSON.stringify({ key: "pet", value: "Has a cat named Miso" }),
    user_id: USER,
    team_id: TEAM,
  });
  assert.equal(saved.saved, true);
  const queue = await admin.reviewQueue({ team_id: TEAM, user_id: USER });
  assert.deepEqual(queue.items.map((item) => item.value), ["Has a cat named Miso"]);
  const approved = await admin.approve(queue.items[0].id);
  assert.equal(approved.status, "active");
  const detail = await admin.memory(approved.id);
  assert.equal(detail.history.at(-1).action, "approve");
  const recalled = await service.recall({ user_id: USER, team_id: TEAM, query: "pets", include: ["memories"] });
  assert.deepEqual(recalled.items.map((item) => (item.kind === "memory" ? item.value : item.text)), ["Has a cat named Miso"]);
  assert.match(await service.hint({ user_id: USER, team_id: TEAM, query: "pets" }), /Has a cat named Miso/);
  assert.equal((await admin.setPinned(approved.id, true)).pinned, true);
  assert.equal(recalled.items[0].kind === "memory" && recalled.items[0].pending_change, null);
  const mine = await me.myMemories();
  assert.deepEqual(mine.items.map((m) => m.key), ["pet"]);
  assert.equal((await me.editMyMemory(approved.id, "Has two cats")).value, "Has two cats");
  assert.equal((await me.pinMyMemory(approved.id, false)).pinned, false);
  assert.equal((await me.exportMyData()).memories[0].value, "Has two cats");
  assert.equal((await service.setName("users", USER, "Ana")).name, "Ana");
  assert.equal((await admin.settings("global")).level, "global");
  assert.ok((await service.eraseUser(USER)) >= 1);
});

test("errors carry the status and the server's message", { skip }, async () => {
  const unknown = await failure(client("pmem_sk_not-a-key").tools());
  assert.equal(unknown.status, 401);
  assert.ok(unknown.serverMessage.length > 0);
  const forbidden = await failure(client(env.PMEM_TEST_USER_TOKEN).reviewQueue());
  assert.equal(forbidden.status, 403);
  const missing = await failure(client(env.PMEM_TEST_ADMIN_TOKEN).approve(randomUUID()));
  assert.equal(missing.status, 404);
  const invalid = await failure(client(env.PMEM_TEST_SERVICE_KEY).recall({ user_id: USER, limit: 0 }));
  assert.equal(invalid.status, 422);
  assert.match(invalid.serverMessage, /limit/);
  const oversized = await failure(
    client(env.PMEM_TEST_SERVICE_KEY).callTool({ name: "memory_save", arguments: "x".repeat(2_000_000), user_id: USER }),
  );
  assert.equal(oversized.status, 413);
});
