// The client's own decisions, without a server: Retry-After, the retry loop, errors, paths.
import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryClient, MemoryApiError, nextWait, retryAfterSeconds, settingsPath, DEFAULT_RETRY } from "../dist/index.js";

const NOW = Date.parse("2027-01-15T08:00:00Z");

test("Retry-After is seconds or an HTTP date", () => {
  assert.equal(retryAfterSeconds("5", NOW), 5);
  assert.equal(retryAfterSeconds("Fri, 15 Jan 2027 08:00:30 GMT", NOW), 30);
  assert.equal(retryAfterSeconds("Fri, 15 Jan 2027 07:00:00 GMT", NOW), 0);
  assert.equal(retryAfterSeconds("soon", NOW), undefined);
  assert.equal(retryAfterSeconds("1".repeat(100), NOW), undefined);
  assert.equal(retryAfterSeconds(null, NOW), undefined);
});

test("only 429 and 503 are retried, within the attempts and the longest wait", () => {
  const policy = { maxAttempts: 3, maxWaitS: 10, backoffS: 0.5 };
  assert.equal(nextWait(503, 5, 1, policy), 5);
  assert.equal(nextWait(429, undefined, 2, policy), 1);
  assert.equal(nextWait(503, 5, 3, policy), undefined);
  assert.equal(nextWait(503, 11, 1, policy), undefined);
  for (const status of [400, 401, 403, 404, 409, 413, 422, 500]) {
    assert.equal(nextWait(status, 1, 1, DEFAULT_RETRY), undefined);
  }
});

test("a 503 with Retry-After is retried, then the answer is returned", async () => {
  const answers = [
    new Response(JSON.stringify({ error: "the database is unavailable; try again shortly" }), {
      status: 503,
      headers: { "retry-after": "5", "content-type": "application/json" },
    }),
    new Response(JSON.stringify({ hint: "- Is vegetarian" }), { status: 200 }),
  ];
  const waits = [];
  const client = new MemoryClient({
    baseUrl: "http://pmem.invalid/",
    credential: "pmem_sk_x",
    fetch: async () => answers.shift(),
    sleep: async (s) => void waits.push(s),
  });
  assert.equal(await client.hint({ user_id: "00000000-0000-0000-0000-000000000001" }), "- Is vegetarian");
  assert.deepEqual(waits, [5]);
});

test("an error answer rejects with the server's status and message", async () => {
  const client = new MemoryClient({
    baseUrl: "http://pmem.invalid",
    credential: "pmem_sk_x",
    fetch: async () => new Response("<html>bad gateway</html>", { status: 502, statusText: "Bad Gateway" }),
  });
  await assert.rejects(client.tools(), (error) => {
    assert.ok(error instanceof MemoryApiError);
    assert.equal(error.status, 502);
    assert.equal(error.serverMessage, "<html>bad gateway</html>");
    assert.equal(error.path, "/v1/tools");
    return true;
  });
});

test("settings paths need a target except the global level", () => {
  assert.equal(settingsPath("global"), "/v1/settings/global");
  assert.equal(settingsPath("team", "t1"), "/v1/settings/teams/t1");
  assert.throws(() => settingsPath("persona"), /persona's id/);
  assert.throws(() => new MemoryClient({ baseUrl: "http://x", credential: "" }), /credential/);
});
