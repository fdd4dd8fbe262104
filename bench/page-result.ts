// How every benchmark page hands over its outcome: `run`'s value as JSON in #result and "done" in
// #status, or "failed: message" and data-error on #result; data-done on #result when either is
// there. The *-cli.mjs drivers (run-page.mjs) wait for data-done and read #result.
export function reportPage(run: () => Promise<unknown>): void {
  const status = document.getElementById('status');
  const result = document.getElementById('result');
  if (!status || !result) return;
  run()
    .then(
      (out) => {
        result.textContent = JSON.stringify(out, null, 2);
        status.textContent = 'done';
      },
      (e: unknown) => {
        console.error(e instanceof Error ? (e.stack ?? e.message) : String(e));
        status.textContent = `failed: ${e instanceof Error ? e.message : String(e)}`;
        result.dataset.error = '1';
      },
    )
    .finally(() => {
      result.dataset.done = '1';
    });
}
