/** When to try a request again: on 429 and 503, after the server's `Retry-After` (or a short
 * backoff when it sends none), within a bounded number of attempts and a bounded wait. */

export interface RetryPolicy {
  /** Attempts in all (1: never retried). */
  maxAttempts: number;
  /** The longest single wait accepted, in seconds; a longer `Retry-After` is not waited for. */
  maxWaitS: number;
  /** The first backoff when the server names no delay, doubled per attempt, in seconds. */
  backoffS: number;
}

export const DEFAULT_RETRY: RetryPolicy = { maxAttempts: 3, maxWaitS: 30, backoffS: 0.5 };

const RETRIED = new Set([429, 503]);
const MAX_HEADER_CHARS = 64;

/** The delay a `Retry-After` value asks for (seconds, or an HTTP date after `nowMs`). */
export function retryAfterSeconds(value: string | null, nowMs: number): number | undefined {
  if (value === null || value.length > MAX_HEADER_CHARS) return undefined;
  const raw = value.trim();
  if (/^[0-9]+$/.test(raw)) return Number(raw);
  const when = Date.parse(raw);
  if (Number.isNaN(when)) return undefined;
  return Math.max(0, (when - nowMs) / 1000);
}

/** The wait before the next attempt after `status` on attempt `attempt` (from 1); undefined: no retry. */
export function nextWait(
  status: number,
  retryAfter: number | undefined,
  attempt: number,
  policy: RetryPolicy,
): number | undefined {
  if (!RETRIED.has(status) || attempt >= policy.maxAttempts) return undefined;
  const wait = retryAfter ?? policy.backoffS * 2 ** (attempt - 1);
  return wait <= policy.maxWaitS ? wait : undefined;
}
