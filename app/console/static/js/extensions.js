// Where further pages plug into the console without touching the existing views.
//
// `datasetPanels`: functions (dataset, {signal, me}) => Element | null, rendered in order at the
// end of a dataset's page. Private summaries and sweep results belong here once the API offers
// them: a panel fetches its own /v1 endpoint with `api()` and draws with ./charts.js. The sweep
// panel (views/sweep.js) is one.
// New top-level pages are one line in ROUTES (main.js) and a module under views/.

import { sweepPanel } from "./views/sweep.js";

export const datasetPanels = [sweepPanel];
