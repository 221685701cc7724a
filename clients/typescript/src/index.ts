/** persona-memory's TypeScript client: typed calls over `fetch` (Node >= 20, browsers), the types
 * generated from the server's OpenAPI document (`schema.d.ts`), one error type (`MemoryApiError`),
 * and `Retry-After` honoured on 429 and 503 within a `RetryPolicy`. */

import type { components } from "./schema.js";
import { MemoryApiError } from "./errors.js";
import { DEFAULT_RETRY, nextWait, retryAfterSeconds, type RetryPolicy } from "./retry.js";

export { MemoryApiError } from "./errors.js";
export { DEFAULT_RETRY, nextWait, retryAfterSeconds, type RetryPolicy } from "./retry.js";
export type { components, paths, operations } from "./schema.js";

export const VERSION = "0.1.0";

type Schemas = components["schemas"];
export type Memory = Schemas["MemoryOut"];
export type Revision = Schemas["RevisionOut"];
export type Turn = Schemas["TurnOut"];
export type RecallAnswer = Schemas["RecallAnswer"];
export type RecallItem = RecallAnswer["items"][number];
export type RecallRequest = Schemas["RecallBody"];
export type HintRequest = Schemas["HintBody"];
export type PendingChange = Schemas["PendingChangeOut"];
export type ReviewPage = Schemas["ReviewPage"];
export type ReviewItem = Schemas["ReviewItemOut"];
export type MemoryPage = Schemas["MemoryPage"];
export type RejectedMemory = Schemas["RejectedMemory"];
export type ConversationPage = Schemas["ConversationPage"];
export type ExportAnswer = Schemas["ExportAnswer"];
export type BulkAnswer = Schemas["BulkAnswer"];
export type MemoryDetail = Schemas["MemoryDetailAnswer"];
export type Settings = Schemas["SettingsAnswer"];
export type SettingsValues = Schemas["SettingsBody"];
export type ToolCallRequest = Schemas["ToolCallBody"];
export type DirectoryName = Schemas["DirectoryAnswer"];
export type SettingsLevel = "global" | "team" | "persona";
export type DirectoryKind = "teams" | "personas" | "users";
type Scope = Memory["scope"];
type Status = Memory["status"];

export interface ClientOptions {
  /** Where `pmem serve` listens, e.g. `http://127.0.0.1:8080`. */
  baseUrl: string;
  /** A service key (`pmem keys create NAME`) or a person's JWT. */
  credential: string;
  /** Per-request deadline in milliseconds (default 10 000). */
  timeoutMs?: number;
  retry?: Partial<RetryPolicy>;
  /** The fetch to use (default: the global one). */
  fetch?: typeof fetch;
  /** How the client waits before a retry (default: a timer). */
  sleep?: (seconds: number) => Promise<void>;
}

type Query = Record<string, string | number | undefined | null>;
type Method = "GET" | "POST" | "PUT" | "PATCH" | "DELETE";

/** Ids in paths: only what a UUID may contain reaches the URL. */
function pathId(value: string): string {
  return encodeURIComponent(value);
}

function waitSeconds(seconds: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, seconds * 1000));
}

/** The server's message of an error answer: its `{"error"}`, else the start of its text. */
async function errorMessage(response: Response): Promise<string> {
  const text = await response.text();
  try {
    const body: unknown = JSON.parse(text);
    if (body !== null && typeof body === "object" && typeof (body as { error?: unknown }).error === "string") {
      return (body as { error: string }).error;
    }
  } catch {
    // not JSON (a proxy's page): quoted below
  }
  return text.trim().slice(0, 300) || response.statusText || "error";
}

/** The HTTP API. Every method resolves to the server's JSON answer, typed, or rejects with a
 * `MemoryApiError`. */
export class MemoryClient {
  readonly #base: string;
  readonly #headers: Record<string, string>;
  readonly #timeoutMs: number;
  readonly #retry: RetryPolicy;
  readonly #fetch: typeof fetch;
  readonly #sleep: (seconds: number) => Promise<void>;

  constructor(options: ClientOptions) {
    if (!options.credential) {
      throw new Error("a credential is required: a service key (pmem keys create) or a person's JWT");
    }
    let base = options.baseUrl;
    while (base.endsWith("/")) base = base.slice(0, -1);
    this.#base = base;
    this.#headers = {
      authorization: `Bearer ${options.credential}`,
      accept: "application/json",
    };
    this.#timeoutMs = options.timeoutMs ?? 10_000;
    this.#retry = { ...DEFAULT_RETRY, ...options.retry };
    this.#fetch = options.fetch ?? globalThis.fetch;
    this.#sleep = options.sleep ?? waitSeconds;
  }

  /** Send one request (retrying a 429 or 503 as the policy allows); its decoded JSON. */
  async request<T>(method: Method, path: string, options: { query?: Query; body?: unknown } = {}): Promise<T> {
    const url = new URL(this.#base + path);
    for (const [name, value] of Object.entries(options.query ?? {})) {
      if (value !== undefined && value !== null) url.searchParams.set(name, String(value));
    }
    const headers = { ...this.#headers };
    let payload: string | undefined;
    if (options.body !== undefined) {
      headers["content-type"] = "application/json";
      payload = JSON.stringify(options.body);
    }
    for (let attempt = 1; ; attempt++) {
      const response = await this.#fetch(url, {
        method,
        headers,
        body: payload,
        signal: AbortSignal.timeout(this.#timeoutMs),
      });
      if (response.ok) {
        if (response.status === 204) return undefined as T;
        return (await response.json()) as T;
      }
      const retryAfter = retryAfterSeconds(response.headers.get("retry-after"), Date.now());
      const wait = nextWait(response.status, retryAfter, attempt, this.#retry);
      if (wait === undefined) {
        throw new MemoryApiError({
          status: response.status,
          message: await errorMessage(response),
          method,
          path,
          retryAfter,
        });
      }
      await response.body?.cancel();
      await this.#sleep(wait);
    }
  }

  // -- the platform (a service key) ------------------------------------------------------------

  /** The `limit` memories most relevant to `query` for the user (and persona) in the team's
   * context, then at most `turn_limit` earlier turns that add something new. */
  recall(body: RecallRequest): Promise<RecallAnswer> {
    return this.request("POST", "/v1/recall", { body });
  }

  /** The prompt hint for the user's next message `query` within `max_tokens` (default: the
   * server's PMEM_HINT_MAX_TOKENS); empty when nothing is remembered. */
  async hint(body: HintRequest): Promise<string> {
    return (await this.request<Schemas["HintAnswer"]>("POST", "/v1/hint", { body })).hint;
  }

  /** Erase everything about a user; how many items were erased. */
  async eraseUser(userId: string): Promise<number> {
    return (await this.request<Schemas["ErasedAnswer"]>("DELETE", `/v1/users/${pathId(userId)}/memories`)).erased;
  }

  // -- tools -----------------------------------------------------------------------------------

  /** The memory tools' OpenAI function schemas (`tools: […]` of a chat completion). */
  async tools(): Promise<Schemas["ToolsAnswer"]["tools"]> {
    return (await this.request<Schemas["ToolsAnswer"]>("GET", "/v1/tools")).tools;
  }

  /** Run a model's tool call in the user's context; its result. A tool's own error (bad arguments)
   * rejects with a 422 `MemoryApiError` whose `serverMessage` goes back to the model. */
  async callTool(body: ToolCallRequest): Promise<Schemas["ToolCallAnswer"]["result"]> {
    return (await this.request<Schemas["ToolCallAnswer"]>("POST", "/v1/tools/call", { body })).result;
  }

  // -- review (admins, team admins) ------------------------------------------------------------

  /** Pending memories and proposed changes the caller may review, newest first. */
  reviewQueue(
    query: {
      team_id?: string;
      scope?: Scope;
      persona_id?: string;
      user_id?: string;
      min_confidence?: number;
      limit?: number;
      cursor?: string;
    } = {},
  ): Promise<ReviewPage> {
    return this.request("GET", "/v1/review", { query });
  }

  /** Approve a pending memory or apply a proposed change. */
  approve(itemId: string): Promise<Memory> {
    return this.request("POST", `/v1/review/${pathId(itemId)}/approve`);
  }

  /** Reject a pending memory or discard a proposed change (`forget`: erase what was said too). */
  reject(itemId: string, options: { forget?: boolean } = {}): Promise<RejectedMemory> {
    return this.request("POST", `/v1/review/${pathId(itemId)}/reject`, { body: { forget: options.forget ?? false } });
  }

  /** Edit and approve. */
  edit(itemId: string, value: string): Promise<Memory> {
    return this.request("POST", `/v1/review/${pathId(itemId)}/edit`, { body: { value } });
  }

  /** Approve or reject many items (`forget`, with reject: erase the turns each one's evidence
   * cites too); each id's outcome. */
  bulk(action: "approve" | "reject", ids: string[], options: { forget?: boolean } = {}): Promise<BulkAnswer> {
    return this.request("POST", "/v1/review/bulk", { body: { action, ids, forget: options.forget ?? false } });
  }

  /** Pin a memory (while active, it is in every hint of its user) or unpin it. */
  setPinned(memoryId: string, pinned: boolean): Promise<Memory> {
    return this.request("PUT", `/v1/memories/${pathId(memoryId)}/pinned`, { body: { pinned } });
  }

  /** One memory with its open proposal and audit history. */
  memory(memoryId: string): Promise<MemoryDetail> {
    return this.request("GET", `/v1/memories/${pathId(memoryId)}`);
  }

  // -- the signed-in person (a person's JWT) ---------------------------------------------------

  /** Own memories, every status. */
  myMemories(
    query: {
      scope?: "user" | "persona_user";
      persona_id?: string;
      status?: Status;
      team_id?: string;
      limit?: number;
      cursor?: string;
    } = {},
  ): Promise<MemoryPage> {
    return this.request("GET", "/v1/me/memories", { query });
  }

  /** Edit an own memory (it becomes active). */
  editMyMemory(memoryId: string, value: string): Promise<Memory> {
    return this.request("PATCH", `/v1/me/memories/${pathId(memoryId)}`, { body: { value } });
  }

  /** Pin an own memory (while active, it is in every hint) or unpin it. */
  pinMyMemory(memoryId: string, pinned: boolean): Promise<Memory> {
    return this.request("PATCH", `/v1/me/memories/${pathId(memoryId)}`, { body: { pinned } });
  }

  /** Reject an own memory (`forget`: erase the turns its evidence cites too). */
  rejectMyMemory(memoryId: string, options: { forget?: boolean } = {}): Promise<RejectedMemory> {
    return this.request("POST", `/v1/me/memories/${pathId(memoryId)}/reject`, {
      body: { forget: options.forget ?? false },
    });
  }

  /** Erase one own memory. */
  async eraseMyMemory(memoryId: string): Promise<void> {
    await this.request<undefined>("DELETE", `/v1/me/memories/${pathId(memoryId)}`);
  }

  /** Erase everything remembered about the caller; how many items. */
  async eraseAllMyMemories(): Promise<number> {
    return (await this.request<Schemas["ErasedAnswer"]>("DELETE", "/v1/me/memories")).erased;
  }

  /** Own remembered conversations, latest first. */
  myConversations(
    query: { persona_id?: string; team_id?: string; limit?: number; cursor?: string } = {},
  ): Promise<ConversationPage> {
    return this.request("GET", "/v1/me/conversations", { query });
  }

  /** Erase the caller's remembered turns of one conversation; how many. */
  async eraseMyConversation(channelId: string): Promise<number> {
    return (await this.request<Schemas["ErasedAnswer"]>("DELETE", `/v1/me/conversations/${pathId(channelId)}`))
      .erased;
  }

  /** Erase every remembered conversation of the caller; how many turns. */
  async eraseAllMyConversations(): Promise<number> {
    return (await this.request<Schemas["ErasedAnswer"]>("DELETE", "/v1/me/conversations")).erased;
  }

  /** Everything about the caller. */
  exportMyData(): Promise<ExportAnswer> {
    return this.request("GET", "/v1/me/export");
  }

  // -- settings and directory ------------------------------------------------------------------

  /** A level's settings (global: no target; team or persona: its id). */
  settings(level: SettingsLevel, targetId?: string): Promise<Settings> {
    return this.request("GET", settingsPath(level, targetId));
  }

  /** Replace a level's settings (a value left out inherits); the level as it is now. */
  putSettings(level: SettingsLevel, values: SettingsValues, targetId?: string): Promise<Settings> {
    return this.request("PUT", settingsPath(level, targetId), { body: values });
  }

  /** Set the display name of a team, persona or user. */
  setName(kind: DirectoryKind, itemId: string, name: string): Promise<DirectoryName> {
    return this.request("PUT", `/v1/directory/${kind}/${pathId(itemId)}`, { body: { name } });
  }
}

/** The settings path of a level; a team or persona level needs its id, the global one has none. */
export function settingsPath(level: SettingsLevel, targetId?: string): string {
  if (level === "global") {
    if (targetId !== undefined) throw new Error("global settings have no target id");
    return "/v1/settings/global";
  }
  if (targetId === undefined) throw new Error(`${level} settings need the ${level}'s id`);
  return `/v1/settings/${level}s/${pathId(targetId)}`;
}
