"""The course's exercises and the learner's stored results (lessons 00-15).

- ``checking``           how every checker answers: not yet, right, or not quite and why (lesson 00)
- ``commands``           commands checked by what they do: horovodrun read option by option, distlab
                         job run for real (lessons 02, 09, 11)
- ``exercises``          the checkers of lessons 00-08: a lesson's cell holds ``...``, a checker says
                         what is right or wrong
- ``exercises_cluster``  lesson 09's exercises; ``exercises_failure`` lesson 10's;
                         ``exercises_long_lines`` lesson 12's; ``exercises_experts`` lesson 13's;
                         ``exercises_fitting`` lesson 14's arithmetic; ``exercises_time`` lesson 15's
- ``exercises_pipeline``, ``exercises_tensor``, ``exercises_zero``  the build-it checkers of lessons 06
                         (1F1B's order), 07 (column- and row-parallel layers) and 08 (ZeRO-1's update)
- ``build``              build-it exercises: the learner's function, typed in a notebook cell, rebuilt
                         from its text on real ranks (``build.run``, ``build.attempt``; lesson 01)
- ``exercises_build``    build-it checkers of lessons 01, 02 and 04 (the gradient average, the start
                         from rank 0 under Horovod, local SGD's average), run on real ranks
- ``exercises_more_data``  lesson 05b's build-it checker: the learner's elastic distortion against the
                         library's, on real held-out digits
- ``exercises_evaluate``  lesson 05's build-it checker: the test accuracy measured on shards and one
                         decision to stop, on real ranks against one process's accuracy
- ``exercises_checkpoint``  lesson 10's build-it checker: what a checkpoint holds, by a real restart on
                         real ranks against the run that never stopped
- ``exercises_precision``  lesson 14's build-it checker: the learner's loss scaler, in fp16 training on
                         real ranks against the library's ``LossScaler``, update by update
- ``exercises_overlap``  lesson 15's build-it checker: the learner's buckets sent from hooks during
                         backward, on real ranks against the library's buckets
- ``exercises_verdict``  lesson 11's build-it checker: the verdict rule, against ``distlab.verdict``
- ``exercises_ring``     lesson 03's build-it checker: the learner's ring all-reduce against
                         ``dist.all_reduce`` on real ranks, chunk by chunk
- ``knowledge_check``    lesson 11: questions from the whole course, checked against the learner's runs
- ``results``            what the learner measured, kept from lesson to lesson so that the course can
                         end on their own numbers
"""
