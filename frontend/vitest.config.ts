// Unit tests of the tab's logic (test/*.test.ts) in happy-dom, a DOM without a browser: the
// modules touch `document`, `localStorage` and `window` at import time. The browser tests
// (tests/test_tab_*.py) cover drawing, layout and the real TensorBoard.
import {defineConfig} from 'vitest/config';

export default defineConfig({
  test: {
    environment: 'happy-dom',
    include: ['test/**/*.test.ts'],
  },
});
