"""The course's exercises and the learner's stored results (lessons 00-13).

- ``exercises``          the checkers of lessons 00-08: a lesson's cell holds ``...``, a checker says
                         what is right or wrong
- ``exercises_cluster``  lesson 09's exercises; ``exercises_failure`` lesson 10's;
                         ``exercises_long_lines`` lesson 12's; ``exercises_experts`` lesson 13's
- ``build``              build-it exercises: the learner's function, typed in a notebook cell, rebuilt
                         from its text on real ranks (``build.run``, ``build.attempt``; lesson 01)
- ``knowledge_check``    lesson 11: questions from the whole course, checked against the learner's runs
- ``results``            what the learner measured, kept from lesson to lesson so that the course can
                         end on their own numbers
"""
