/** The one error the client throws for an answer that is not a success. */
export class MemoryApiError extends Error {
  /** The HTTP status. */
  readonly status: number;
  /** The server's message (its `{"error": …}`). */
  readonly serverMessage: string;
  readonly method: string;
  readonly path: string;
  /** Seconds the server asked to wait before trying again (`Retry-After`), when it said. */
  readonly retryAfter: number | undefined;

  constructor(init: {
    status: number;
    message: string;
    method: string;
    path: string;
    retryAfter?: number | undefined;
  }) {
    super(`${init.method} ${init.path}: ${init.status} ${init.message}`);
    this.name = "MemoryApiError";
    this.status = init.status;
    this.serverMessage = init.message;
    this.method = init.method;
    this.path = init.path;
    this.retryAfter = init.retryAfter;
  }
}
