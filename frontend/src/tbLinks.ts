// Links to the same run and tag in TensorBoard's own tabs: Time Series reads `runFilter` and
// `tagFilter` (regular expressions) from the page's query, Scalars reads `tagFilter` and
// `regexInput` (its run filter) from the hash. Links open in the top page, replacing the tab.

function exact(text: string): string {
  return `^${text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`;
}

/** TensorBoard's page: the host when the tab runs in its iframe, else the server's root. */
function tensorBoardPage(): URL {
  try {
    if (window.parent !== window) return new URL(window.parent.location.href);
  } catch {
    // cross-origin host: fall back to the server root
  }
  return new URL('../', window.location.href);
}

export function timeSeriesUrl(run: string, tag: string): string {
  const url = tensorBoardPage();
  url.search = '';
  url.searchParams.set('runFilter', exact(run));
  url.searchParams.set('tagFilter', exact(tag));
  url.hash = 'timeseries';
  return url.href;
}

export function scalarsUrl(run: string, tag: string): string {
  const url = tensorBoardPage();
  url.search = '';
  url.hash = `scalars&tagFilter=${encodeURIComponent(exact(tag))}&regexInput=${encodeURIComponent(exact(run))}`;
  return url.href;
}
