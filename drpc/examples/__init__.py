"""Example DRPC topologies, each exposing a builder factory.

- ``reach``: storm-starter's reach of a URL (tweeters, their followers,
  distinct count), with the reference data from the seeds.
- ``exclamation``: one basic bolt appending "!".
- ``square``: step one emits n*n tuples for argument n, a batch step counts,
  an aggregate step sums; exercises coordination including empty requests.
"""
