import os
import sys

# The training tests import the shared tiny config helper and the repository's configs/.
sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
