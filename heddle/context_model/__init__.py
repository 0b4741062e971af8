"""The context predictor (paper s.4.1): a pretrained text encoder and a regression head that
read a trajectory's context after each step and predict its remaining output tokens, steps and
tool seconds.

* ``examples``: (context, remaining work) pairs at every step of recorded trajectories;
* ``encoder``: the frozen encoder, from local files only (``minilm``: the packaged MiniLM);
* ``model``: the head, its folder format, and ``ContextModel.predict``;
* ``train``: ``heddle predictor train``; ``stream``: recorded trajectories with their text,
  from the event stream (``--from-stream``);
* ``service``: ``heddle predictor serve``, the model as a NATS micro service; ``wire``: its
  requests and replies;
* ``metrics``: the paper's predictor figures (Fig. 13) over arrays of predictions.

The context model in ``heddle sim sweep --predictor context`` is an experiment's
(``heddle.experiments.sweep_context``).

torch and transformers are imported by the modules that need them, not here.
"""
