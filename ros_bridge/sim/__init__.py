"""`vla-bridge sim`: a simulated robot (gym-aloha's bimanual arms) closing the loop through the
bridge and a live vla-server."""
