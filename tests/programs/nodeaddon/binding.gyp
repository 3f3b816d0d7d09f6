{
  "targets": [
    {
      "target_name": "nodeaddon",
      "sources": ["scratch.c"],
      "defines": ["NAPI_VERSION=8"]
    }
  ]
}
