// Where these pages find the runtime (SPEC WEB-4). Served by the runtime itself, leave it empty:
// the pages call their own origin. Hosting web/ somewhere else (another origin, a CDN), set
// `apiBase` to the runtime's origin — e.g. "https://voice-api.example.com", no trailing slash —
// and list this page's origin in the runtime's OPENREALTIME_CORS_ORIGINS. A page may instead say
// it in a tag: <meta name="openrealtime-api-base" content="https://voice-api.example.com">.
window.OPENREALTIME_CONFIG = Object.assign({ apiBase: "" }, window.OPENREALTIME_CONFIG || {});
