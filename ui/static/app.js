// Auto-refresh: the only script of the dashboard. Pages work without it.
(function () {
  var s = parseInt(document.body.getAttribute("data-refresh") || "0", 10);
  if (s > 0) {
    setTimeout(function () {
      if (!document.hidden) { location.reload(); }
      else { document.addEventListener("visibilitychange", function () { location.reload(); }, { once: true }); }
    }, s * 1000);
  }
})();
