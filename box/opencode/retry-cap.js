// retry-cap: an OpenCode plugin (the only one the image's adapter loads) that ends the run
// once a model call has failed twice. OpenCode retries a failed model call five times
// with backoff (2 s doubling, no cap without a Retry-After header: over a minute of a
// box's time on a provider that answers 500) and offers no setting for it. It announces
// each retry as a session.status event of type "retry" whose attempt counts the failures
// so far; at the second this prints the provider's message on stderr and exits 1, so a
// failing model quarantines the run in seconds with a reason the owner can read.
const FAILURES = 2;

export const ImpyardRetryCap = async () => ({
  event: async ({ event }) => {
    if (!event || event.type !== "session.status") return;
    const status = (event.properties || {}).status;
    if (!status || status.type !== "retry" || !(status.attempt >= FAILURES)) return;
    const message = String(status.message || "no message").replace(/[\x00-\x1f\x7f]/g, " ");
    process.stderr.write(
      `opencode-imp: the model API failed ${status.attempt} times, giving up: ${message}\n`,
    );
    process.exit(1);
  },
});
