// A chat platform's message handler in Node: the memory hint for the user's message, an
// OpenAI-compatible chat completion with it, and at the end of the conversation a
// `conversation.ended` event on NATS JetStream for the worker (with `Nats-Msg-Id`: JetStream drops
// a duplicate publish).
//
//   cd clients/typescript && npm ci && npm run build && cd ../../examples/node && npm ci
//   node chat_handler.mjs "I'm vegetarian. What should I cook tonight?"
//
// Environment: PMEM_URL, PMEM_API_KEY (a service key), PMEM_USER_ID, PMEM_PERSONA_ID, PMEM_TEAM_ID
// (as `pmem demo --keep-running` prints them), PMEM_NATS_URL (default nats://localhost:4222),
// PMEM_SUBJECT (default chat.conversation.ended), OPENAI_BASE_URL, OPENAI_API_KEY, CHAT_MODEL.
// Prints one JSON line: the hint, the model's reply, the event id and its stream sequence.
import { randomUUID } from "node:crypto";
import { connect, headers as natsHeaders } from "nats";
import { MemoryClient } from "persona-memory-client";

const env = process.env;
const message = process.argv[2] ?? "I'm vegetarian and I live in Lisbon. What should I cook tonight?";
const context = {
  user_id: env.PMEM_USER_ID,
  persona_id: env.PMEM_PERSONA_ID || null,
  team_id: env.PMEM_TEAM_ID || null,
};

const memory = new MemoryClient({ baseUrl: env.PMEM_URL ?? "http://127.0.0.1:8080", credential: env.PMEM_API_KEY });

// 1. What is remembered that matters for this message (reviewed facts first).
const hint = await memory.hint({ ...context, query: message });

// 2. The model, with the hint in its system prompt.
const system = "You are a helpful assistant." + (hint ? `\n\nWhat you know about the user:\n${hint}` : "");
const completion = await fetch(`${(env.OPENAI_BASE_URL ?? "https://api.openai.com/v1").replace(/\/$/, "")}/chat/completions`, {
  method: "POST",
  headers: { "content-type": "application/json", authorization: `Bearer ${env.OPENAI_API_KEY ?? ""}` },
  body: JSON.stringify({
    model: env.CHAT_MODEL ?? "gpt-4o-mini",
    messages: [
      { role: "system", content: system },
      { role: "user", content: message },
    ],
  }),
  signal: AbortSignal.timeout(60_000),
});
if (!completion.ok) throw new Error(`chat completion: ${completion.status} ${await completion.text()}`);
const reply = (await completion.json()).choices[0].message.content;

// 3. The conversation ended: publish it for the memory worker.
const now = new Date().toISOString();
const event = {
  event_id: randomUUID(),
  type: "conversation.ended",
  occurred_at: now,
  team_id: context.team_id,
  channel_id: env.PMEM_CHANNEL_ID || randomUUID(),
  user_id: context.user_id,
  persona_id: context.persona_id,
  messages: [
    { role: "user", content: message, at: now },
    { role: "assistant", content: reply },
  ],
};
const nc = await connect({ servers: env.PMEM_NATS_URL ?? "nats://localhost:4222", timeout: 5000 });
try {
  const h = natsHeaders();
  h.set("Nats-Msg-Id", event.event_id);
  const ack = await nc
    .jetstream()
    .publish(env.PMEM_SUBJECT ?? "chat.conversation.ended", JSON.stringify(event), { headers: h, timeout: 10_000 });
  console.log(JSON.stringify({ hint, reply, event_id: event.event_id, stream: ack.stream, seq: ack.seq }));
} finally {
  await nc.close();
}
