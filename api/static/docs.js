// Starts Swagger UI on /docs from the files the server serves itself (no inline script: the
// Content-Security-Policy allows only the server's own files).
window.addEventListener("load", function () {
  window.ui = SwaggerUIBundle({
    url: "/openapi.json",
    dom_id: "#swagger-ui",
    deepLinking: true,
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
  });
});
