// django-ojs: lets the official OJS admin UI write with a Django session.
//
// The UI calls fetch() with no CSRF header. Django refuses a POST, PUT, PATCH or DELETE
// made with a session cookie unless it carries the CSRF token, so this wraps window.fetch:
// requests to this page's own origin with an unsafe method get the token in the header
// Django reads (X-CSRFToken by default) and credentials "same-origin". Other requests pass
// through unchanged; the token never leaves the origin. django-ojs puts this script, with
// the data-* attributes read below, first in the UI's <head> (api/views/admin_ui.py).
(function () {
  "use strict";
  var script = document.currentScript;
  var pageToken = (script && script.getAttribute("data-csrf-token")) || "";
  var cookieName = (script && script.getAttribute("data-csrf-cookie")) || "";
  var headerName = (script && script.getAttribute("data-csrf-header")) || "X-CSRFToken";
  var SAFE = /^(GET|HEAD|OPTIONS|TRACE)$/i;
  var originalFetch = window.fetch;

  function cookie(name) {
    var prefix = name + "=";
    var parts = document.cookie ? document.cookie.split(";") : [];
    for (var i = 0; i < parts.length; i++) {
      var part = parts[i].trim();
      if (part.indexOf(prefix) === 0) {
        return decodeURIComponent(part.slice(prefix.length));
      }
    }
    return "";
  }

  // The cookie first: Django rotates the token at login (another tab may have logged in
  // again since this page came); the token in the page when the cookie cannot be read
  // (CSRF_USE_SESSIONS, CSRF_COOKIE_HTTPONLY).
  function token() {
    return (cookieName && cookie(cookieName)) || pageToken;
  }

  window.fetch = function (input, init) {
    var isRequest = typeof Request !== "undefined" && input instanceof Request;
    var method = (init && init.method) || (isRequest ? input.method : "GET");
    var url = new URL(isRequest ? input.url : String(input), window.location.href);
    if (SAFE.test(method) || url.origin !== window.location.origin) {
      return originalFetch.call(window, input, init);
    }
    var headers = new Headers((init && init.headers) || (isRequest ? input.headers : undefined));
    if (!headers.has(headerName)) {
      headers.set(headerName, token());
    }
    var options = Object.assign({}, init, { headers: headers, credentials: "same-origin" });
    return originalFetch.call(window, input, options);
  };
})();
